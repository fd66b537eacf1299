//! Helpers the xtask suites share: a recursive copy, to make a scratch
//! tree from the fixture.
#![allow(clippy::unwrap_used, dead_code)]

use std::fs;
use std::path::Path;

/// Copy the tree at `from` to `to`, creating directories as needed.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}
