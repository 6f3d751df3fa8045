//! A realistic CRD schema (nested objects, a list-map with keys, int-or-string, enum, pattern,
//! defaults) through the whole path a write takes: the CRD's schema is checked, an object is
//! pruned, defaulted and validated.

use serde_json::{json, Value};
use strata_apiext::defaults::apply_defaults_with;
use strata_apiext::prune::prune;
use strata_apiext::schema::Schema;
use strata_apiext::structural::check_schema;
use strata_apiext::validate::validate_with;

fn app_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "pattern": "^[a-z0-9.-]+(/[a-z0-9.-]+)*(:[A-Za-z0-9._-]+)?$"},
                    "replicas": {"type": "integer", "minimum": 0, "maximum": 50, "default": 1},
                    "tier": {"type": "string", "enum": ["frontend", "backend"], "default": "backend"},
                    "resources": {
                        "type": "object",
                        "default": {},
                        "properties": {
                            "cpu": {"x-kubernetes-int-or-string": true, "default": "100m",
                                    "anyOf": [{"type": "integer"}, {"type": "string"}],
                                    "pattern": "^[0-9]+m?$"},
                            "memoryMi": {"type": "integer", "default": 128, "multipleOf": 64},
                        },
                    },
                    "ports": {
                        "type": "array",
                        "maxItems": 4,
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                        "items": {
                            "type": "object",
                            "required": ["containerPort"],
                            "properties": {
                                "name": {"type": "string", "maxLength": 15},
                                "containerPort": {"type": "integer", "minimum": 1, "maximum": 65535},
                                "protocol": {"type": "string", "enum": ["TCP", "UDP"], "default": "TCP"},
                            },
                        },
                    },
                    "env": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "rollout": {
                        "type": "object",
                        "properties": {
                            "maxSurge": {"x-kubernetes-int-or-string": true,
                                         "anyOf": [{"type": "integer"}, {"type": "string"}]},
                            "pausedUntil": {"type": "string", "format": "date-time", "nullable": true},
                        },
                    },
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "readyReplicas": {"type": "integer"},
                    "conditions": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {"type": "object", "required": ["type", "status"], "properties": {
                            "type": {"type": "string"},
                            "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                        }},
                    },
                },
            },
        },
    })
}

fn app(spec: Value) -> Value {
    json!({
        "apiVersion": "apps.example.com/v1",
        "kind": "App",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": spec,
    })
}

/// What a write does: prune unknown fields, default, validate.
fn write(schema: &Schema, mut object: Value) -> (Value, Vec<String>, Vec<String>) {
    let pruned = prune(schema, &mut object, true);
    apply_defaults_with(schema, &mut object);
    let errors = validate_with(schema, &object)
        .iter()
        .map(ToString::to_string)
        .collect();
    (object, pruned, errors)
}

#[test]
fn the_schema_is_accepted() {
    let got = check_schema(&app_schema(), "spec.versions[0].schema.openAPIV3Schema");
    assert!(got.is_empty(), "{got:#?}");
}

#[test]
fn a_good_object_is_pruned_defaulted_and_valid() {
    let schema = Schema::parse(&app_schema());
    let (object, pruned, errors) = write(
        &schema,
        app(json!({
            "image": "registry.example.com/shop:v1.2",
            "ports": [{"containerPort": 8080, "name": "http"}, {"containerPort": 8080, "protocol": "UDP"}],
            "env": {"MODE": "prod"},
            "rollout": {"maxSurge": "25%", "pausedUntil": null},
            "debug": true,
        })),
    );
    assert_eq!(pruned, ["spec.debug"]);
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(
        object["spec"],
        json!({
            "image": "registry.example.com/shop:v1.2",
            "ports": [
                {"containerPort": 8080, "name": "http", "protocol": "TCP"},
                {"containerPort": 8080, "protocol": "UDP"},
            ],
            "env": {"MODE": "prod"},
            "rollout": {"maxSurge": "25%", "pausedUntil": null},
            "replicas": 1,
            "tier": "backend",
            "resources": {"cpu": "100m", "memoryMi": 128},
        })
    );
}

#[test]
fn a_bad_object_gets_kubernetes_causes() {
    let schema = Schema::parse(&app_schema());
    let (_, _, errors) = write(
        &schema,
        app(json!({
            "image": "Shop:latest",
            "replicas": "three",
            "tier": "db",
            "resources": {"cpu": true, "memoryMi": 100},
            "ports": [
                {"containerPort": 80, "name": "a-very-long-port-name"},
                {"containerPort": 70000},
                {"containerPort": 80, "protocol": "TCP"},
            ],
            "env": {"DEBUG": 1},
            "rollout": {"pausedUntil": "tomorrow"},
        })),
    );
    assert_eq!(
        errors,
        [
            r#"spec.image: Invalid value: "Shop:latest": spec.image in body should match '^[a-z0-9.-]+(/[a-z0-9.-]+)*(:[A-Za-z0-9._-]+)?$'"#,
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            r#"spec.tier: Unsupported value: "db": supported values: "frontend", "backend""#,
            r#"spec.resources.cpu: Invalid value: "boolean": spec.resources.cpu in body must be of type integer,string: "boolean""#,
            r#"<nil>: Invalid value: "": "spec.resources.cpu" must validate at least one schema (anyOf)"#,
            r#"spec.resources.cpu: Invalid value: "boolean": spec.resources.cpu in body must be of type integer: "boolean""#,
            "spec.resources.memoryMi: Invalid value: 100: spec.resources.memoryMi in body should be a multiple of 64",
            "spec.ports[0].name: Too long: value is too long",
            "spec.ports[1].containerPort: Invalid value: 70000: spec.ports[1].containerPort in body should be less than or equal to 65535",
            r#"spec.env.DEBUG: Invalid value: "integer": spec.env.DEBUG in body must be of type string: "integer""#,
            r#"spec.rollout.pausedUntil: Invalid value: "tomorrow": spec.rollout.pausedUntil in body must be of type date-time: "tomorrow""#,
            r#"spec.ports[2]: Duplicate value: map[string]interface {}{"containerPort":80, "protocol":"TCP"}"#,
        ]
    );
}

#[test]
fn status_list_maps_and_missing_required_fields() {
    let schema = Schema::parse(&app_schema());
    let mut object = app(json!({"replicas": 2}));
    object["status"] = json!({"conditions": [
        {"type": "Ready", "status": "True"},
        {"type": "Ready", "status": "Maybe"},
        {"status": "False"},
    ]});
    let (_, _, errors) = write(&schema, object);
    assert_eq!(
        errors,
        [
            "spec.image: Required value",
            r#"status.conditions[1].status: Unsupported value: "Maybe": supported values: "True", "False", "Unknown""#,
            "status.conditions[2].type: Required value",
            r#"status.conditions[1]: Duplicate value: map[string]interface {}{"type":"Ready"}"#,
        ]
    );
}
