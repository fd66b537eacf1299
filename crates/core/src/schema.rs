//! JSON schemas (behaviour H9): the subset accepted for structured output,
//! checked with every offending path listed, and compiled validators for any
//! schema (tool inputs) or a subset-checked, object-rooted one (structured
//! output). Values are validated with the `jsonschema` crate, which reports
//! every failing instance path; that part (`validate`, `is_valid`) is the
//! `validation` feature (on by default). Without it a schema is still
//! carried, compared, serialised and subset-checked, but only its JSON shape
//! (an object or a boolean) is checked when it is compiled, and no value can
//! be validated against it: the methods are absent, never a silent pass.

use std::fmt;
#[cfg(feature = "validation")]
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Keywords a node of a subset schema may carry.
const KEYWORDS: [&str; 12] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "oneOf",
    "title",
    "description",
    "default",
    "examples",
];

/// Names `type` may take.
const TYPES: [&str; 7] = [
    "object", "array", "string", "number", "integer", "boolean", "null",
];

/// One place where a schema leaves the supported subset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaViolation {
    /// JSON Pointer into the schema document; `""` is the root.
    pub path: String,
    /// What is wrong there, as a short sentence.
    pub problem: String,
}

/// A schema rejected by the subset check or by the validator compiler; lists every violation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SchemaError {
    /// Every violation, in document order.
    pub violations: Vec<SchemaViolation>,
}

impl SchemaError {
    /// The stable error code for this failure.
    pub fn code(&self) -> &'static str {
        "INVALID_SCHEMA"
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("schema is outside the supported subset: ")?;
        write_joined(
            f,
            self.violations
                .iter()
                .map(|v| (v.path.as_str(), v.problem.as_str())),
        )
    }
}

/// One way a value fails a schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ValueViolation {
    /// JSON Pointer into the value; `""` is the root.
    pub instance_path: String,
    /// What is wrong there, as reported by the validator.
    pub message: String,
}

/// A value that does not match a schema; lists every failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValueError {
    /// Every failure, in the validator's order.
    pub violations: Vec<ValueViolation>,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("value does not match the schema: ")?;
        write_joined(
            f,
            self.violations
                .iter()
                .map(|v| (v.instance_path.as_str(), v.message.as_str())),
        )
    }
}

/// Writes `path: text` pairs separated by `; `, the root path shown as `(root)`.
fn write_joined<'a>(
    f: &mut fmt::Formatter<'_>,
    items: impl Iterator<Item = (&'a str, &'a str)>,
) -> fmt::Result {
    for (i, (path, text)) in items.enumerate() {
        if i > 0 {
            f.write_str("; ")?;
        }
        let path = if path.is_empty() { "(root)" } else { path };
        write!(f, "{path}: {text}")?;
    }
    Ok(())
}

/// Check a schema against the H9 subset, collecting every violation.
///
/// # Errors
/// A [`SchemaError`] listing every place the schema leaves the subset.
pub fn check_object_schema(schema: &Value) -> Result<(), SchemaError> {
    let mut out = Vec::new();
    match schema.as_object() {
        Some(map) if map.get("type") == Some(&Value::from("object")) => {}
        Some(map) if map.contains_key("type") => {
            push(&mut out, "/type", "the root must be `type: \"object\"`");
        }
        _ => push(&mut out, "", "the root must be `type: \"object\"`"),
    }
    if schema.is_object() {
        check_node(schema, "", &mut out);
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(SchemaError { violations: out })
    }
}

fn push(out: &mut Vec<SchemaViolation>, path: &str, problem: impl Into<String>) {
    let (path, problem) = (path.to_owned(), problem.into());
    out.push(SchemaViolation { path, problem });
}

/// Escapes one JSON Pointer reference token.
fn token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn is_scalar(value: &Value) -> bool {
    !(value.is_array() || value.is_object())
}

/// Checks one schema node at `path`; the root's `type` rule is checked by the caller.
fn check_node(node: &Value, path: &str, out: &mut Vec<SchemaViolation>) {
    let Some(map) = node.as_object() else {
        push(
            out,
            path,
            format!("a schema must be a JSON object, not `{node}`"),
        );
        return;
    };
    // Sort explicitly so the order holds even if `preserve_order` is enabled elsewhere.
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for key in keys {
        let value = &map[key.as_str()];
        let here = format!("{path}/{}", token(key));
        match key.as_str() {
            // The root's `type` is judged by `check_object_schema`.
            "type" if path.is_empty() => {}
            "type" => check_type(value, &here, out),
            "properties" => match value.as_object() {
                Some(props) => {
                    let mut names: Vec<&String> = props.keys().collect();
                    names.sort();
                    for name in names {
                        check_node(
                            &props[name.as_str()],
                            &format!("{here}/{}", token(name)),
                            out,
                        );
                    }
                }
                None => push(out, &here, "`properties` must be an object of schemas"),
            },
            "required" => check_required(value, map, &here, out),
            "additionalProperties" if !value.is_boolean() => {
                push(out, &here, "`additionalProperties` must be a boolean");
            }
            "items" if value.is_array() => {
                push(out, &here, "`items` must be a single schema, not an array");
            }
            "items" => check_node(value, &here, out),
            "enum" => match value.as_array() {
                Some(values) if !values.is_empty() => {
                    for (i, v) in values.iter().enumerate() {
                        if !is_scalar(v) {
                            push(out, &format!("{here}/{i}"), "`enum` values must be scalars");
                        }
                    }
                }
                _ => push(out, &here, "`enum` must be a non-empty array"),
            },
            "const" if !is_scalar(value) => push(out, &here, "`const` must be a scalar"),
            "oneOf" => match value.as_array() {
                Some(branches) if !branches.is_empty() => {
                    for (i, branch) in branches.iter().enumerate() {
                        check_node(branch, &format!("{here}/{i}"), out);
                    }
                }
                _ => push(out, &here, "`oneOf` must be a non-empty array of schemas"),
            },
            "title" | "description" if !value.is_string() => {
                push(out, &here, format!("`{key}` must be a string"));
            }
            k if KEYWORDS.contains(&k) => {}
            k => push(out, &here, format!("keyword `{k}` is not supported")),
        }
    }
}

fn check_type(value: &Value, path: &str, out: &mut Vec<SchemaViolation>) {
    let known = |v: &Value| v.as_str().is_some_and(|s| TYPES.contains(&s));
    let ok = match value {
        Value::Array(names) => {
            !names.is_empty()
                && names.iter().all(known)
                && names
                    .iter()
                    .enumerate()
                    .all(|(i, n)| !names[..i].contains(n))
        }
        other => known(other),
    };
    if !ok {
        let problem = format!(
            "`type` must be one of {} or a non-empty array of distinct ones",
            TYPES.join(", ")
        );
        push(out, path, problem);
    }
}

fn check_required(
    value: &Value,
    node: &Map<String, Value>,
    path: &str,
    out: &mut Vec<SchemaViolation>,
) {
    let Some(names) = value.as_array() else {
        push(out, path, "`required` must be an array of strings");
        return;
    };
    let props = node.get("properties").and_then(Value::as_object);
    for (i, name) in names.iter().enumerate() {
        let here = format!("{path}/{i}");
        match name.as_str() {
            None => push(out, &here, "`required` entries must be strings"),
            Some(n) if names[..i].contains(name) => {
                push(out, &here, format!("`required` names `{n}` more than once"));
            }
            Some(n) if !props.is_some_and(|p| p.contains_key(n)) => {
                push(
                    out,
                    &here,
                    format!("`required` names `{n}`, which is not in `properties`"),
                );
            }
            Some(_) => {}
        }
    }
}

/// Any JSON Schema compiled once (tool input schemas use this: no subset check).
#[derive(Clone)]
pub struct JsonSchema {
    raw: Value,
    #[cfg(feature = "validation")]
    validator: Arc<jsonschema::Validator>,
}

impl JsonSchema {
    /// Compiles `schema`.
    ///
    /// # Errors
    /// A [`SchemaError`] with one violation at the place the compiler rejected.
    pub fn compile(schema: Value) -> Result<Self, SchemaError> {
        #[cfg(not(feature = "validation"))]
        return match schema {
            Value::Object(_) | Value::Bool(_) => Ok(Self { raw: schema }),
            _ => Err(SchemaError {
                violations: vec![SchemaViolation {
                    path: String::new(),
                    problem: "a schema must be an object or a boolean".to_owned(),
                }],
            }),
        };
        #[cfg(feature = "validation")]
        match jsonschema::validator_for(&schema) {
            Ok(validator) => Ok(Self {
                raw: schema,
                validator: Arc::new(validator),
            }),
            Err(err) => Err(SchemaError {
                violations: vec![SchemaViolation {
                    path: err.instance_path().as_str().to_owned(),
                    problem: err.to_string(),
                }],
            }),
        }
    }

    /// The schema as given.
    pub fn as_value(&self) -> &Value {
        &self.raw
    }

    /// Validates `value`, listing every failure.
    ///
    /// # Errors
    /// A [`ValueError`] when the value does not match.
    #[cfg(feature = "validation")]
    pub fn validate(&self, value: &Value) -> Result<(), ValueError> {
        let violations: Vec<ValueViolation> = self
            .validator
            .iter_errors(value)
            .map(|err| ValueViolation {
                instance_path: err.instance_path().as_str().to_owned(),
                message: err.to_string(),
            })
            .collect();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ValueError { violations })
        }
    }

    /// Whether `value` matches.
    #[cfg(feature = "validation")]
    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }
}

impl fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("JsonSchema").field(&self.raw).finish()
    }
}

impl PartialEq for JsonSchema {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Eq for JsonSchema {}

impl Serialize for JsonSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::compile(Value::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

/// An object-rooted schema inside the H9 subset, compiled.
#[derive(Clone, PartialEq, Eq)]
pub struct ObjectSchema(JsonSchema);

impl ObjectSchema {
    /// Checks `schema` against the subset, then compiles it.
    ///
    /// # Errors
    /// A [`SchemaError`] listing every violation, or the compiler's rejection.
    pub fn new(schema: Value) -> Result<Self, SchemaError> {
        check_object_schema(&schema)?;
        JsonSchema::compile(schema).map(Self)
    }

    /// The schema as given.
    pub fn as_value(&self) -> &Value {
        self.0.as_value()
    }

    /// The compiled schema, for code that takes any [`JsonSchema`].
    pub fn as_json_schema(&self) -> &JsonSchema {
        &self.0
    }

    /// Validates `value`, listing every failure.
    ///
    /// # Errors
    /// A [`ValueError`] when the value does not match.
    #[cfg(feature = "validation")]
    pub fn validate(&self, value: &Value) -> Result<(), ValueError> {
        self.0.validate(value)
    }

    /// Whether `value` matches.
    #[cfg(feature = "validation")]
    pub fn is_valid(&self, value: &Value) -> bool {
        self.0.is_valid(value)
    }
}

impl fmt::Debug for ObjectSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ObjectSchema")
            .field(self.as_value())
            .finish()
    }
}

impl Serialize for ObjectSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ObjectSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Self::new(Value::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const _: fn() = || {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<JsonSchema>();
        send_sync::<ObjectSchema>();
    };

    fn paths(schema: &Value) -> Vec<String> {
        match check_object_schema(schema) {
            Ok(()) => Vec::new(),
            Err(e) => e.violations.into_iter().map(|v| v.path).collect(),
        }
    }

    #[test]
    fn accepts_the_subset() {
        let accepted = [
            json!({"type": "object"}),
            json!({"type": "object", "title": "T", "description": "d", "default": {}, "examples": [{}],
                   "properties": {"a": {"type": "object", "properties": {"b": {"type": ["string", "null"]}},
                                        "required": ["b"], "additionalProperties": false}},
                   "required": ["a"], "additionalProperties": true}),
            json!({"type": "object", "properties": {"rows": {"type": "array",
                   "items": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}),
            json!({"type": "object", "properties": {"c": {"enum": ["r", 1, 2.5, true, null]}, "k": {"const": "x"}}}),
            json!({"type": "object", "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "number"}]}}}),
        ];
        for schema in accepted {
            assert_eq!(paths(&schema), Vec::<String>::new(), "{schema}");
            assert!(ObjectSchema::new(schema).is_ok());
        }
    }

    #[test]
    fn rejects_outside_the_subset() {
        // Each entry: keywords added to `{"type": "object"}`, and the paths reported.
        #[rustfmt::skip]
        let rejected = [
            (json!({"$defs": {}}), "/$defs"),
            (json!({"properties": {"a": {"$ref": "#/x"}}}), "/properties/a/$ref"),
            (json!({"anyOf": [], "allOf": [], "not": {}}), "/allOf /anyOf /not"),
            (json!({"properties": {"a": {"pattern": "x", "format": "date"}}}),
             "/properties/a/format /properties/a/pattern"),
            (json!({"patternProperties": {}, "minProperties": 1}), "/minProperties /patternProperties"),
            (json!({"additionalProperties": {"type": "string"}}), "/additionalProperties"),
            (json!({"properties": {"l": {"items": [{"type": "string"}]}}}), "/properties/l/items"),
            (json!({"properties": {"e": {"enum": [[1], {"a": 1}, 2]}}}),
             "/properties/e/enum/0 /properties/e/enum/1"),
            (json!({"properties": {"e": {"enum": []}, "c": {"const": {}}}}),
             "/properties/c/const /properties/e/enum"),
            (json!({"oneOf": []}), "/oneOf"),
            (json!({"oneOf": [true, {"minimum": 1}]}), "/oneOf/0 /oneOf/1/minimum"),
            (json!({"properties": {"a/b": {"type": "date"}}}), "/properties/a~1b/type"),
            (json!({"required": ["x", 3, "a", "a"], "properties": {"a": {}}}),
             "/required/0 /required/1 /required/3"),
            (json!({"title": 1, "description": null}), "/description /title"),
        ];
        for (extra, expected) in rejected {
            let mut schema = json!({"type": "object"});
            if let (Some(map), Value::Object(extra)) = (schema.as_object_mut(), extra) {
                map.extend(extra);
            }
            assert_eq!(paths(&schema).join(" "), expected, "{schema}");
            let err = ObjectSchema::new(schema).err();
            assert_eq!(err.map(|e| e.code()), Some("INVALID_SCHEMA"));
        }
    }

    #[test]
    fn reports_every_violation_in_document_order() {
        let schema = json!({
            "type": "object",
            "$defs": {"x": {}},
            "properties": {
                "age": {"type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string", "pattern": "^a"}},
                "kind": {"oneOf": [{"type": "string"}, {"type": "decimal"}]}
            },
            "required": ["age", "missing"],
            "additionalProperties": {"type": "string"}
        });
        let err = check_object_schema(&schema).unwrap_err();
        insta::assert_snapshot!(err, @"schema is outside the supported subset: /$defs: keyword `$defs` is not supported; /additionalProperties: `additionalProperties` must be a boolean; /properties/age/minimum: keyword `minimum` is not supported; /properties/kind/oneOf/1/type: `type` must be one of object, array, string, number, integer, boolean, null or a non-empty array of distinct ones; /properties/tags/items/pattern: keyword `pattern` is not supported; /required/1: `required` names `missing`, which is not in `properties`");
        assert_eq!(err.violations.len(), 6);
    }

    #[test]
    fn root_must_be_an_object_type() {
        for (schema, path) in [
            (json!({"type": "array"}), "/type"),
            (json!({"type": ["object", "null"]}), "/type"),
            (json!({"type": "date"}), "/type"),
            (json!({"properties": {}}), ""),
            (json!(true), ""),
            (json!([]), ""),
        ] {
            let err = check_object_schema(&schema).unwrap_err();
            assert_eq!(err.violations.len(), 1, "{schema}");
            assert_eq!(err.violations[0].path, path, "{schema}");
            assert_eq!(
                err.violations[0].problem,
                "the root must be `type: \"object\"`"
            );
        }
        let err = check_object_schema(&json!(true)).unwrap_err();
        insta::assert_snapshot!(err, @r#"schema is outside the supported subset: (root): the root must be `type: "object"`"#);
    }

    #[test]
    #[cfg(feature = "validation")]
    fn validation_lists_every_failing_path() {
        let schema = ObjectSchema::new(json!({
            "type": "object",
            "properties": {
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["a", "b"]},
                "name": {"type": "string"}
            },
            "required": ["age", "name"],
            "additionalProperties": false
        }))
        .unwrap();
        assert!(
            schema
                .validate(&json!({"age": 3, "tags": ["x"], "name": 1}))
                .is_err()
        );
        let good = json!({"age": 3, "tags": ["x"], "mode": "a", "name": "n"});
        assert!(schema.validate(&good).is_ok());
        let bad = json!({"age": "x", "tags": ["ok", 5], "mode": "c", "extra": true});
        let err = schema.validate(&bad).unwrap_err();
        let mut got: Vec<&str> = err
            .violations
            .iter()
            .map(|v| v.instance_path.as_str())
            .collect();
        got.sort_unstable();
        assert_eq!(got, ["", "", "/age", "/mode", "/tags/1"]);
        assert!(!schema.is_valid(&bad));
        let text = err.to_string();
        assert!(
            text.starts_with("value does not match the schema: "),
            "{text}"
        );
        assert!(
            text.contains(r#"/age: "x" is not of type "integer""#),
            "{text}"
        );
        assert!(text.contains("(root): "), "{text}");
    }

    #[test]
    #[cfg(feature = "validation")]
    fn json_schema_compiles_anything_valid() {
        let any =
            JsonSchema::compile(json!({"type": "integer", "minimum": 1, "$defs": {}})).unwrap();
        assert!(any.is_valid(&json!(2)));
        assert!(!any.is_valid(&json!(0)));
        let err = JsonSchema::compile(json!({"properties": {"a": {"type": 5}}})).unwrap_err();
        assert_eq!(err.violations.len(), 1);
        assert_eq!(err.violations[0].path, "/properties/a/type");
        assert_eq!(err.code(), "INVALID_SCHEMA");
        // Inside the subset but refused by the meta-schema: still reported with its path.
        let err = ObjectSchema::new(json!({"type": "object", "examples": 5})).unwrap_err();
        assert_eq!(err.violations[0].path, "/examples", "{err}");
    }

    #[test]
    fn serde_round_trip() {
        let raw =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        let schema = ObjectSchema::new(raw.clone()).unwrap();
        let text = serde_json::to_string(&schema).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), raw);
        let back: ObjectSchema = serde_json::from_str(&text).unwrap();
        assert_eq!(back, schema);
        assert_eq!(format!("{back:?}"), format!("ObjectSchema({raw:?})"));
        let any: JsonSchema = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&any).unwrap(), raw);
        assert_eq!(any, *schema.as_json_schema());

        let err = serde_json::from_value::<ObjectSchema>(json!({"type": "object", "minimum": 1}))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "schema is outside the supported subset: /minimum: keyword `minimum` is not supported"
        );
        #[cfg(feature = "validation")]
        assert!(serde_json::from_value::<JsonSchema>(json!({"type": 5})).is_err());
        assert!(serde_json::from_value::<JsonSchema>(json!("object")).is_err());
    }

    #[test]
    #[cfg(not(feature = "validation"))]
    fn without_validation_a_schema_is_carried_and_only_its_shape_checked() {
        let lenient = JsonSchema::compile(json!({"type": 5})).unwrap();
        assert_eq!(lenient.as_value(), &json!({"type": 5}));
        assert!(JsonSchema::compile(json!(true)).is_ok());
        let err = JsonSchema::compile(json!([1])).unwrap_err();
        assert_eq!(
            err.violations[0].problem,
            "a schema must be an object or a boolean"
        );
        // The subset check needs no validator.
        assert!(ObjectSchema::new(json!({"type": "object", "minimum": 1})).is_err());
    }
}
