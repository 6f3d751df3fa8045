//! The schema checks of a CustomResourceDefinition version, each with the cause kube-apiserver
//! 1.31 reports for it.

use serde_json::{json, Value};
use strata_apiext::structural::check_schema;

const P: &str = "spec.versions[0].schema.openAPIV3Schema";

fn check(schema: Value) -> Vec<String> {
    check_schema(&schema, P)
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// A root schema with `spec` declared as `spec`.
fn with_spec(spec: Value) -> Value {
    json!({"type": "object", "properties": {"spec": spec}})
}

fn expect(schema: Value, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|w| w.replace("$P", P)).collect();
    assert_eq!(check(schema), want);
}

#[test]
fn a_typical_schema_passes() {
    let schema = json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"},
                    "replicas": {"type": "integer", "format": "int32", "minimum": 0, "default": 1},
                    "port": {"anyOf": [{"type": "integer"}, {"type": "string"}],
                             "x-kubernetes-int-or-string": true},
                    "env": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string"}, "value": {"type": "string"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set",
                             "items": {"type": "string"}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"},
                               "x-kubernetes-map-type": "granular"},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                 "x-kubernetes-preserve-unknown-fields": true},
                    "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
                },
            },
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        },
    });
    assert_eq!(check(schema), Vec::<String>::new());
}

#[test]
fn every_specified_node_needs_a_type() {
    expect(
        json!({"properties": {"spec": {"properties": {"a": {}}}}}),
        &[
            "$P.properties[spec].properties[a].type: Required value: must not be empty for specified object fields",
            "$P.properties[spec].type: Required value: must not be empty for specified object fields",
            "$P.type: Required value: must not be empty at the root",
        ],
    );
    expect(
        with_spec(json!({"type": "array", "items": {}})),
        &["$P.properties[spec].items.type: Required value: must not be empty for specified array items"],
    );
    expect(
        with_spec(json!({"type": "array"})),
        &["$P.properties[spec].items: Required value: must be specified"],
    );
    // Untyped is fine under int-or-string and preserve-unknown-fields.
    expect(
        with_spec(json!({"type": "object", "properties": {
            "a": {"x-kubernetes-int-or-string": true},
            "b": {"x-kubernetes-preserve-unknown-fields": true},
        }})),
        &[],
    );
}

#[test]
fn the_root_is_an_object_without_additional_properties() {
    expect(
        json!({"type": "string"}),
        &[r#"$P.type: Invalid value: "string": must be object at the root"#],
    );
    expect(
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        &["$P.additionalProperties: Forbidden: must not be used at the root"],
    );
    expect(
        json!({"type": "object", "nullable": true}),
        &["$P.nullable: Forbidden: nullable cannot be true at the root"],
    );
}

#[test]
fn root_metadata_may_only_restrict_names() {
    expect(
        json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20}}}}}),
        &[],
    );
    expect(
        json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object"}}}}}),
        &["$P.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"],
    );
    expect(
        json!({"type": "object", "properties": {"metadata": {"type": "string"}}}),
        &[r#"$P.properties[metadata].type: Invalid value: "string": must be object"#],
    );
    expect(
        json!({"type": "object", "properties": {"kind": {"type": "integer"}}}),
        &[r#"$P.properties[kind].type: Invalid value: "integer": must be string"#],
    );
    expect(
        json!({"type": "object", "properties": {"metadata": {"type": "object",
            "properties": {"name": {"type": "string", "default": "x"}}}}}),
        &["$P.properties[metadata].properties[name].default: Forbidden: must not be set in top-level metadata"],
    );
}

#[test]
fn properties_and_additional_properties_exclude_each_other() {
    expect(
        with_spec(json!({"type": "object", "properties": {"a": {"type": "string"}},
                         "additionalProperties": {"type": "string"}})),
        &["$P.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"],
    );
}

#[test]
fn unsupported_keywords() {
    expect(
        with_spec(json!({"type": "object", "$ref": "#/definitions/x"})),
        &["$P.properties[spec].$ref: Forbidden: $ref is not supported"],
    );
    expect(
        with_spec(json!({"type": "object", "definitions": {"x": {"type": "string"}}})),
        &["$P.properties[spec].definitions: Forbidden: definitions is not supported"],
    );
    expect(
        with_spec(json!({"type": "object", "patternProperties": {"^a": {"type": "string"}}})),
        &["$P.properties[spec].patternProperties: Forbidden: patternProperties is not supported"],
    );
    expect(
        with_spec(json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true})),
        &["$P.properties[spec].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"],
    );
    expect(
        with_spec(json!({"type": "object", "id": "x"})),
        &["$P.properties[spec].id: Forbidden: id is not supported"],
    );
    expect(
        with_spec(json!({"type": "array", "items": {"type": "string"},
                         "additionalItems": false})),
        &["$P.properties[spec].additionalItems: Forbidden: additionalItems is not supported"],
    );
    expect(
        with_spec(json!({"type": "widget"})),
        &[
            r#"$P.properties[spec].type: Unsupported value: "widget": supported values: "array", "boolean", "integer", "number", "object", "string""#,
        ],
    );
    expect(
        with_spec(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": false})),
        &["$P.properties[spec].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"],
    );
    // `$schema` only fails the conversion to a structural schema, reported when nothing else is.
    expect(
        json!({"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"}),
        &[r#"$P: Invalid value: "": OpenAPIV3Schema 'schema' is not supported"#],
    );
}

#[test]
fn junctors_hold_value_validations_only() {
    expect(
        with_spec(
            json!({"type": "object", "properties": {"a": {"type": "string"}},
                         "anyOf": [{"type": "object", "required": ["a"], "description": "x"}]}),
        ),
        &[
            "$P.properties[spec].anyOf[0].description: Forbidden: must be empty to be structural",
            "$P.properties[spec].anyOf[0].type: Forbidden: must be empty to be structural",
        ],
    );
    expect(
        with_spec(json!({"type": "object", "oneOf": [{"properties": {"metadata": {}}}]})),
        &["$P.properties[spec].oneOf[0].properties[metadata]: Forbidden: must not be specified in a nested context"],
    );
    // A field named only inside a root junctor must be specified outside it too.
    expect(
        json!({"type": "object", "properties": {"spec": {"type": "object"}},
               "allOf": [{"properties": {"status": {"required": ["x"]}}}]}),
        &["$P.properties[status]: Required value: because it is defined in $P.allOf[0].properties[status]"],
    );
    expect(
        with_spec(json!({"type": "string", "pattern": "a("})),
        &[
            r#"$P.properties[spec].pattern: Invalid value: "a(": must be a valid regular expression, but isn't: error parsing regexp: missing closing ): `a(`"#,
        ],
    );
}

#[test]
fn int_or_string_and_embedded_resources() {
    expect(
        with_spec(json!({"x-kubernetes-int-or-string": true,
                         "x-kubernetes-preserve-unknown-fields": true})),
        &["$P.properties[spec].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"],
    );
    expect(
        with_spec(json!({"x-kubernetes-embedded-resource": true,
                         "x-kubernetes-preserve-unknown-fields": true})),
        &["$P.properties[spec].type: Required value: must be object if x-kubernetes-embedded-resource is true"],
    );
    expect(
        with_spec(json!({"type": "object", "x-kubernetes-embedded-resource": true})),
        &["$P.properties[spec].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"],
    );
    expect(
        with_spec(json!({"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"metadata": {"type": "object", "properties": {
                "annotations": {"type": "object", "additionalProperties": {"type": "string", "default": "x"}}}}}})),
        &["$P.properties[spec].properties[metadata].properties[annotations].additionalProperties.default: Forbidden: must not be set inside additionalProperties applying to object metadata"],
    );
}

#[test]
fn list_and_map_types() {
    expect(
        with_spec(json!({"type": "object", "x-kubernetes-list-type": "set"})),
        &[
            r#"$P.properties[spec].type: Invalid value: "object": must be array if x-kubernetes-list-type is specified"#,
        ],
    );
    expect(
        with_spec(json!({"type": "array", "items": {"type": "string"},
                         "x-kubernetes-list-type": "bag"})),
        &[
            r#"$P.properties[spec].x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", "map""#,
        ],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "map",
                         "items": {"type": "object", "properties": {"name": {"type": "string"}}}})),
        &["$P.properties[spec].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["name", "port"],
                         "items": {"type": "object", "required": ["name"],
                                   "properties": {"name": {"type": "string"}}}})),
        &[
            r#"$P.properties[spec].x-kubernetes-list-map-keys: Invalid value: []string{"name", "port"}: entries must all be names of item properties"#,
        ],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["name"],
                         "items": {"type": "object", "properties": {"name": {"type": "string"}}}})),
        &["$P.properties[spec].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["sub"],
                         "items": {"type": "object", "required": ["sub"], "properties": {
                             "sub": {"type": "object"}}}})),
        &[
            r#"$P.properties[spec].items.properties[sub].type: Invalid value: "object": must be a scalar type if parent array's x-kubernetes-list-type is map"#,
        ],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["name"], "items": {"type": "string"}})),
        &[
            r#"$P.properties[spec].items.type: Invalid value: "string": must be object if parent array's x-kubernetes-list-type is map"#,
        ],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-map-keys": ["name"],
                         "items": {"type": "object", "required": ["name"],
                                   "properties": {"name": {"type": "string"}}}})),
        &["$P.properties[spec].x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty"],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "set",
                         "items": {"type": "object", "properties": {"a": {"type": "string"}}}})),
        &[
            r#"$P.properties[spec].items.x-kubernetes-map-type: Invalid value: "null": must be atomic as item of a list with x-kubernetes-list-type=set"#,
        ],
    );
    expect(
        with_spec(json!({"type": "array", "x-kubernetes-list-type": "set",
                         "items": {"type": "string", "nullable": true}})),
        &["$P.properties[spec].items.nullable: Forbidden: cannot be nullable when x-kubernetes-list-type is set"],
    );
    expect(
        with_spec(json!({"type": "object", "x-kubernetes-map-type": "sometimes"})),
        &[
            r#"$P.properties[spec].x-kubernetes-map-type: Unsupported value: "sometimes": supported values: "atomic", "granular""#,
        ],
    );
}

#[test]
fn defaults_must_validate_and_be_pruned() {
    expect(
        with_spec(json!({"type": "object", "properties": {
            "replicas": {"type": "integer", "default": "one"}}})),
        &[
            r#"$P.properties[spec].properties[replicas].default: Invalid value: "string":  in body must be of type integer: "string""#,
        ],
    );
    expect(
        with_spec(
            json!({"type": "object", "default": {"replicas": "one"}, "properties": {
            "replicas": {"type": "integer"}}}),
        ),
        &[
            r#"$P.properties[spec].default.replicas: Invalid value: "string": replicas in body must be of type integer: "string""#,
        ],
    );
    expect(
        with_spec(
            json!({"type": "object", "default": {"extra": 1}, "properties": {
            "replicas": {"type": "integer"}}}),
        ),
        &[
            r#"$P.properties[spec].default: Invalid value: map[string]interface {}{"extra":1}: must not have unknown fields"#,
        ],
    );
    expect(
        with_spec(json!({"type": "string", "enum": ["a", "b"], "default": "c"})),
        &[r#"$P.properties[spec].default: Unsupported value: "c": supported values: "a", "b""#],
    );
    expect(
        with_spec(
            json!({"type": "object", "x-kubernetes-embedded-resource": true,
                         "x-kubernetes-preserve-unknown-fields": true, "default": {}}),
        ),
        &[
            "$P.properties[spec].default.apiVersion: Required value",
            "$P.properties[spec].default.kind: Required value",
        ],
    );
}
