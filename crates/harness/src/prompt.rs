//! System-prompt assembly: ordered, named sections rendered with strict `{{var}}` interpolation.
//!
//! The persona section can be shadowed per agent for a single render without changing the base
//! prompt. Interpolation must never guess: an unknown variable, an unclosed `{{` or an invalid
//! name is an error (behaviour H8), never silently left in place or replaced by an empty string.

use std::borrow::Cow;
use std::collections::BTreeMap;

/// The id of the persona section.
pub const PERSONA_SECTION: &str = "persona";

/// Why a template could not be interpolated; offsets are byte offsets of the offending `{{`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A well-formed placeholder names a variable that is not defined.
    #[error("unknown template variable `{name}` at byte {offset}")]
    UnknownVariable {
        /// The variable name, without braces or whitespace.
        name: String,
        /// Byte offset of the placeholder's `{{`.
        offset: usize,
    },
    /// A `{{` has no matching `}}`.
    #[error("unclosed `{{{{` at byte {offset}")]
    Unclosed {
        /// Byte offset of the unclosed `{{`.
        offset: usize,
    },
    /// The placeholder's name is empty or contains characters outside `[A-Za-z0-9_.-]`.
    #[error("invalid template variable name at byte {offset}")]
    InvalidName {
        /// Byte offset of the placeholder's `{{`.
        offset: usize,
    },
}

/// Replace every `{{name}}` (optional inner whitespace `{{ name }}`; names are `[A-Za-z0-9_.-]+`)
/// with `vars[name]`.
///
/// There is no escape: a literal `{{` that does not start a valid placeholder is an error. Single
/// braces pass through unchanged. Substituted values are not themselves interpolated.
///
/// # Errors
/// [`TemplateError::UnknownVariable`], [`TemplateError::Unclosed`] or
/// [`TemplateError::InvalidName`], each carrying the byte offset of the offending `{{`.
pub fn interpolate(
    template: &str,
    vars: &BTreeMap<String, String>,
) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut pos = 0;
    while let Some(found) = template[pos..].find("{{") {
        let offset = pos + found;
        out.push_str(&template[pos..offset]);
        let body_start = offset + 2;
        let Some(len) = template[body_start..].find("}}") else {
            return Err(TemplateError::Unclosed { offset });
        };
        let name = template[body_start..body_start + len].trim();
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
        if name.is_empty() || !name.chars().all(valid) {
            return Err(TemplateError::InvalidName { offset });
        }
        let value = vars
            .get(name)
            .ok_or_else(|| TemplateError::UnknownVariable {
                name: name.to_owned(),
                offset,
            })?;
        out.push_str(value);
        pos = body_start + len + 2;
    }
    out.push_str(&template[pos..]);
    Ok(out)
}

/// A section failed to interpolate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("prompt section `{section}`: {source}")]
pub struct PromptError {
    /// The id of the failing section.
    pub section: String,
    /// The interpolation failure.
    #[source]
    pub source: TemplateError,
}

/// Ordered, named prompt sections plus the variables their templates may use.
#[derive(Debug, Clone, Default)]
pub struct SystemPrompt {
    sections: Vec<(String, String)>,
    vars: BTreeMap<String, String>,
}

impl SystemPrompt {
    /// An empty prompt with no sections and no variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set or replace the section `id` (keeps its original position when replaced; otherwise
    /// appends).
    #[must_use]
    pub fn section(mut self, id: impl Into<String>, template: impl Into<String>) -> Self {
        let (id, template) = (id.into(), template.into());
        match self
            .sections
            .iter_mut()
            .find(|(existing, _)| *existing == id)
        {
            Some(slot) => slot.1 = template,
            None => self.sections.push((id, template)),
        }
        self
    }

    /// Shortcut for `section(PERSONA_SECTION, template)`.
    #[must_use]
    pub fn persona(self, template: impl Into<String>) -> Self {
        self.section(PERSONA_SECTION, template)
    }

    /// Set or replace the variable `name`.
    #[must_use]
    pub fn var(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// The variables every render may use.
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    /// Check every template against the variables now, so a bad deployment fails at build time.
    ///
    /// # Errors
    /// The first section (in order) whose template does not interpolate.
    pub fn validate(&self) -> Result<(), PromptError> {
        for (id, template) in &self.sections {
            check(id, template, &self.vars)?;
        }
        Ok(())
    }

    /// Render sections in order, joined by `"\n\n"`, skipping empty results.
    ///
    /// `persona`, when `Some`, shadows the persona section's template for this render only (same
    /// interpolation rules); when there is no persona section it is placed first. `extra_vars`
    /// extend or override the prompt's variables for this render.
    ///
    /// # Errors
    /// The first section whose template does not interpolate (a shadowing persona reports section
    /// [`PERSONA_SECTION`]).
    pub fn render(
        &self,
        persona: Option<&str>,
        extra_vars: &BTreeMap<String, String>,
    ) -> Result<String, PromptError> {
        let vars: Cow<'_, BTreeMap<String, String>> = if extra_vars.is_empty() {
            Cow::Borrowed(&self.vars)
        } else {
            let mut merged = self.vars.clone();
            merged.extend(extra_vars.iter().map(|(k, v)| (k.clone(), v.clone())));
            Cow::Owned(merged)
        };
        let has_persona = self.sections.iter().any(|(id, _)| id == PERSONA_SECTION);
        let leading = persona
            .filter(|_| !has_persona)
            .map(|p| (PERSONA_SECTION, p));
        let sections = self.sections.iter().map(|(id, template)| match persona {
            Some(shadow) if id == PERSONA_SECTION => (id.as_str(), shadow),
            _ => (id.as_str(), template.as_str()),
        });
        let mut parts = Vec::with_capacity(self.sections.len() + 1);
        for (id, template) in leading.into_iter().chain(sections) {
            let text = check(id, template, &vars)?;
            if !text.is_empty() {
                parts.push(text);
            }
        }
        Ok(parts.join("\n\n"))
    }
}

fn check(id: &str, template: &str, vars: &BTreeMap<String, String>) -> Result<String, PromptError> {
    interpolate(template, vars).map_err(|source| PromptError {
        section: id.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use TemplateError::{InvalidName, Unclosed};

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    fn unknown(name: &str, offset: usize) -> TemplateError {
        TemplateError::UnknownVariable {
            name: name.into(),
            offset,
        }
    }

    fn none() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn interpolates_happy_paths() {
        let v = vars(&[("a", "1"), ("b.c", "2"), ("d-e_f", "{{x}}")]);
        let cases = [
            ("x={{a}} y={{ b.c }} z={{\td-e_f\n}}", "x=1 y=2 z={{x}}"),
            ("{{a}}{{b.c}}{{a}}", "121"),
            ("fn f() { {a} } }} {", "fn f() { {a} } }} {"),
            ("", ""),
        ];
        for (template, expected) in cases {
            assert_eq!(
                interpolate(template, &v).as_deref(),
                Ok(expected),
                "{template}"
            );
        }
    }

    #[test]
    fn interpolation_errors_carry_byte_offsets() {
        let v = vars(&[("a", "1")]);
        let cases = [
            ("{{a}} {{ nope }}", unknown("nope", 6)),
            ("ok {{a}} {{a", Unclosed { offset: 9 }),
            ("x{{}}", InvalidName { offset: 1 }),
            ("{{ }}", InvalidName { offset: 0 }),
            ("{{a b}}", InvalidName { offset: 0 }),
            ("\\{{a b}}", InvalidName { offset: 1 }),
            ("{{{a}}}", InvalidName { offset: 0 }),
        ];
        for (template, expected) in cases {
            assert_eq!(interpolate(template, &v), Err(expected), "{template}");
        }
        let messages = [
            unknown("nope", 6),
            Unclosed { offset: 9 },
            InvalidName { offset: 1 },
        ]
        .map(|e| e.to_string());
        insta::assert_snapshot!(messages.join("\n"), @r"
        unknown template variable `nope` at byte 6
        unclosed `{{` at byte 9
        invalid template variable name at byte 1
        ");
    }

    #[test]
    fn offsets_are_bytes_after_unicode() {
        assert_eq!(
            interpolate("héllo → {{who}}", &none()),
            Err(unknown("who", 11))
        );
        let v = vars(&[("who", "wörld")]);
        assert_eq!(
            interpolate("héllo → {{who}}!", &v).as_deref(),
            Ok("héllo → wörld!")
        );
    }

    fn base() -> SystemPrompt {
        SystemPrompt::new()
            .section("rules", "Follow {{policy}}.")
            .persona("You are {{name}}.")
            .section("blank", "")
            .section("tools", "Tools: {{tools}}")
            .var("name", "Dee")
            .var("policy", "the rules")
            .var("tools", "none")
    }

    #[test]
    fn renders_in_order_and_shadows_persona_for_one_render() {
        let prompt = base();
        prompt.validate().unwrap();
        let plain = prompt.render(None, &none()).unwrap();
        insta::assert_snapshot!(plain, @r"
        Follow the rules.

        You are Dee.

        Tools: none
        ");
        let extra = vars(&[("role", "reviewer"), ("tools", "grep")]);
        let shadowed = prompt.render(Some("A {{ role }} named {{name}}."), &extra);
        let expected = "Follow the rules.\n\nA reviewer named Dee.\n\nTools: grep";
        assert_eq!(shadowed.as_deref(), Ok(expected));
        assert_eq!(prompt.render(None, &none()), Ok(plain));
        assert_eq!(prompt.vars()["tools"], "none");
    }

    #[test]
    fn shadow_persona_without_persona_section_goes_first() {
        let prompt = SystemPrompt::new().section("rules", "Be brief.");
        assert_eq!(
            prompt.render(Some("Hi."), &none()).as_deref(),
            Ok("Hi.\n\nBe brief.")
        );
        assert_eq!(prompt.render(None, &none()).as_deref(), Ok("Be brief."));
    }

    #[test]
    fn shadow_persona_with_unknown_var_names_persona_section() {
        let err = base().render(Some("I am {{ghost}}"), &none()).unwrap_err();
        assert_eq!(err.section, PERSONA_SECTION);
        assert_eq!(err.source, unknown("ghost", 5));
        let expected = "prompt section `persona`: unknown template variable `ghost` at byte 5";
        assert_eq!(err.to_string(), expected);
    }

    #[test]
    fn replacing_a_section_keeps_its_position() {
        let prompt = base().section("rules", "New rules.").persona("P.");
        let out = prompt.render(None, &none());
        assert_eq!(out.as_deref(), Ok("New rules.\n\nP.\n\nTools: none"));
    }

    #[test]
    fn validate_catches_a_bad_section() {
        let prompt = base().section("footer", "Bye {{ user");
        let source = Unclosed { offset: 4 };
        let expected = PromptError {
            section: "footer".into(),
            source,
        };
        assert_eq!(prompt.validate(), Err(expected.clone()));
        assert_eq!(prompt.render(None, &none()), Err(expected));
    }
}
