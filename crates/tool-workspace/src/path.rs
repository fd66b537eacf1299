//! Path confinement: every path a tool touches is resolved against the
//! calling agent's cwd and must land inside the workspace root. The
//! existing prefix of the path is canonicalised (so `..` and symbolic links
//! are followed as the kernel would follow them); a part that does not
//! exist yet (a file to be created) may hold no `..` and must not start at a
//! dangling symbolic link. The check is made when the call starts: a
//! process racing the tool to swap a directory for a link is out of scope
//! (see ARCHITECTURE.md).

use std::path::{Component, Path, PathBuf};

use crate::error::WorkspaceError;

/// Resolve `input` (as the model wrote it) against `cwd` and confine it to
/// `root` (already canonical). Returns the absolute path to use.
///
/// # Errors
/// [`WorkspaceError::OutsideRoot`] when it lands outside `root`,
/// [`WorkspaceError::DanglingLink`] for a link to nowhere,
/// [`WorkspaceError::UnresolvableParent`] for `..` past a missing directory.
pub fn confine(root: &Path, cwd: &Path, input: &str) -> Result<PathBuf, WorkspaceError> {
    let joined = if input.is_empty() {
        cwd.to_path_buf()
    } else {
        cwd.join(input)
    };
    let mut existing = joined.clone();
    let mut tail: Vec<std::ffi::OsString> = Vec::new();
    let canonical = loop {
        match std::fs::canonicalize(&existing) {
            Ok(path) => break path,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                // A link that exists but points nowhere: refuse rather than
                // let a write create its target wherever it points.
                if std::fs::symlink_metadata(&existing).is_ok() {
                    return Err(WorkspaceError::DanglingLink(input.to_owned()));
                }
                match existing.components().next_back() {
                    Some(Component::Normal(name)) => {
                        tail.push(name.to_owned());
                        existing.pop();
                    }
                    Some(Component::CurDir) => {
                        existing.pop();
                    }
                    _ => return Err(WorkspaceError::UnresolvableParent(input.to_owned())),
                }
            }
            Err(err) => return Err(WorkspaceError::io(input, &err)),
        }
    };
    let mut resolved = canonical;
    for name in tail.into_iter().rev() {
        resolved.push(name);
    }
    if resolved.starts_with(root) {
        Ok(resolved)
    } else {
        Err(WorkspaceError::OutsideRoot {
            path: input.to_owned(),
            root: root.display().to_string(),
        })
    }
}

/// How a resolved path is shown to the model: relative to the caller's cwd
/// when it is under it, absolute otherwise.
pub fn display(cwd: &Path, path: &Path) -> String {
    let cwd = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    match path.strip_prefix(&cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.rs"), "a").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        (dir, root)
    }

    #[test]
    fn inside_paths_resolve() {
        let (_dir, root) = setup();
        assert_eq!(
            confine(&root, &root, "src/a.rs").unwrap(),
            root.join("src/a.rs")
        );
        assert_eq!(
            confine(&root, &root.join("src"), "../src/./a.rs").unwrap(),
            root.join("src/a.rs")
        );
        assert_eq!(
            confine(&root, &root, "new/dir/file.txt").unwrap(),
            root.join("new/dir/file.txt")
        );
        assert_eq!(confine(&root, &root, "").unwrap(), root);
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, root) = setup();
        for input in ["../secret", "src/../../secret", "/etc/passwd", "../new.txt"] {
            let err = confine(&root, &root, input).unwrap_err();
            assert_eq!(err.code(), "OUTSIDE_ROOT", "{input}");
        }
        let abs = dir.path().join("secret");
        assert_eq!(
            confine(&root, &root, abs.to_str().unwrap())
                .unwrap_err()
                .code(),
            "OUTSIDE_ROOT"
        );
        assert_eq!(
            confine(&root, &root, "missing/../../x").unwrap_err().code(),
            "UNRESOLVABLE_PARENT"
        );
    }

    #[test]
    fn symlinks_out_of_the_root_are_refused() {
        let (dir, root) = setup();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("nowhere"), root.join("dangling")).unwrap();
        std::os::unix::fs::symlink(root.join("src/a.rs"), root.join("inner")).unwrap();
        assert_eq!(
            confine(&root, &root, "link").unwrap_err().code(),
            "OUTSIDE_ROOT"
        );
        assert_eq!(
            confine(&root, &root, "up/secret").unwrap_err().code(),
            "OUTSIDE_ROOT"
        );
        assert_eq!(
            confine(&root, &root, "up/new.txt").unwrap_err().code(),
            "OUTSIDE_ROOT"
        );
        assert_eq!(
            confine(&root, &root, "dangling").unwrap_err().code(),
            "DANGLING_LINK"
        );
        assert_eq!(
            confine(&root, &root, "inner").unwrap(),
            root.join("src/a.rs")
        );
    }

    #[test]
    fn a_cwd_outside_the_root_confines_too() {
        let (dir, root) = setup();
        assert_eq!(
            confine(&root, dir.path(), "secret").unwrap_err().code(),
            "OUTSIDE_ROOT"
        );
    }
}
