//! Structural defaulting and pruning of custom resources, as Kubernetes does them.

use serde_json::{json, Value};
use strata_apiext::defaults::apply_defaults;
use strata_apiext::prune::prune;
use strata_apiext::schema::Schema;

fn defaulted(schema: &Value, mut object: Value) -> Value {
    apply_defaults(schema, &mut object);
    // Idempotent: a second pass changes nothing.
    let mut again = object.clone();
    apply_defaults(schema, &mut again);
    assert_eq!(again, object);
    object
}

#[test]
fn absent_properties_get_their_default_at_every_level() {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "default": 1},
                    "strategy": {
                        "type": "object",
                        "default": {},
                        "properties": {
                            "type": {"type": "string", "default": "Rolling"},
                            "maxSurge": {"x-kubernetes-int-or-string": true, "default": "25%"},
                        },
                    },
                    "ports": {
                        "type": "array",
                        "items": {"type": "object", "properties": {
                            "protocol": {"type": "string", "default": "TCP"},
                            "port": {"type": "integer"},
                        }},
                    },
                    "limits": {
                        "type": "object",
                        "additionalProperties": {"type": "object", "properties": {
                            "max": {"type": "integer", "default": 10},
                        }},
                    },
                },
            },
        },
    });
    let got = defaulted(
        &schema,
        json!({
            "apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
            "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}],
                     "limits": {"cpu": {}, "mem": {"max": 3}}},
        }),
    );
    assert_eq!(
        got["spec"],
        json!({
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
            "limits": {"cpu": {"max": 10}, "mem": {"max": 3}},
            "replicas": 1,
            // The defaulted {} is itself defaulted.
            "strategy": {"type": "Rolling", "maxSurge": "25%"},
        })
    );
}

#[test]
fn an_absent_object_without_default_stays_absent() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"a": {"type": "string", "default": "x"}}}}});
    assert_eq!(
        defaulted(&schema, json!({"kind": "W"})),
        json!({"kind": "W"})
    );
}

#[test]
fn nulls_are_defaulted_or_dropped_unless_nullable() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "withDefault": {"type": "string", "default": "d"},
        "plain": {"type": "string"},
        "nullable": {"type": "string", "nullable": true},
        "nullableWithDefault": {"type": "string", "nullable": true, "default": "d"},
        "list": {"type": "array", "items": {"type": "string", "default": "item"}},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }}}});
    let got = defaulted(
        &schema,
        json!({"spec": {
            "withDefault": null, "plain": null, "nullable": null, "nullableWithDefault": null,
            "list": ["a", null], "map": {"k": null, "j": "v"}, "free": {"x": null},
        }}),
    );
    assert_eq!(
        got["spec"],
        json!({
            "withDefault": "d", "nullable": null, "nullableWithDefault": null,
            "list": ["a", "item"], "map": {"j": "v"}, "free": {"x": null},
        })
    );
}

#[test]
fn root_metadata_is_not_defaulted() {
    let schema = json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "default": "x"}}},
        "kind": {"type": "string", "default": "K"},
    }});
    assert_eq!(
        defaulted(&schema, json!({"metadata": {}})),
        json!({"metadata": {}})
    );
}

#[test]
fn pruning_drops_unknown_fields_and_says_where() {
    let schema = Schema::parse(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "known": {"type": "string"},
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                     "properties": {"typed": {"type": "object", "properties": {}}}},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                         "properties": {"spec": {"type": "object"}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }},
    }}));
    let mut obj = json!({
        "apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
        "spec": {
            "known": "k", "unknown": 1,
            "list": [{"a": "x", "b": "y"}],
            "free": {"anything": true, "typed": {"gone": 1}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "extra": 1, "spec": {}},
            "labels": {"a": "b"},
        },
        "status": {},
    });
    let pruned = prune(&schema, &mut obj, true);
    assert_eq!(
        pruned,
        [
            "spec.free.typed.gone",
            "spec.list[0].b",
            "spec.template.extra",
            "spec.unknown",
            "status",
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "example.com/v1", "kind": "W", "metadata": {"name": "w"},
            "spec": {
                "known": "k",
                "list": [{"a": "x"}],
                "free": {"anything": true, "typed": {}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}},
                "labels": {"a": "b"},
            },
        })
    );
}
