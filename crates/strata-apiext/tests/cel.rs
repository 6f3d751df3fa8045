//! `x-kubernetes-validations` end to end through `strata_apiext::cel::Rules`: compiling a CRD
//! version's schema (and the errors Kubernetes reports when the CRD is written), then
//! validating custom resources against it: the libraries, transition rules, messages,
//! fieldPath and reason, runtime errors, and the cost limits.

use std::time::Instant;

use serde_json::{json, Value};
use strata_apiext::cel::Rules;
use strata_object::field::FieldErrorKind;

const ROOT: &str = "spec.versions[0].schema.openAPIV3Schema";

/// A CRD schema whose `spec` has the given properties and rules.
fn spec_schema(properties: Value, rules: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": properties,
                "x-kubernetes-validations": rules,
            }
        }
    })
}

fn compile(schema: &Value) -> Rules {
    match Rules::compile(schema, ROOT) {
        Ok(r) => r,
        Err(errs) => panic!(
            "{}",
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn compile_errors(schema: &Value) -> Vec<String> {
    match Rules::compile(schema, ROOT) {
        Ok(_) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    }
}

fn errors(rules: &Rules, object: Value, old: Option<Value>) -> Vec<String> {
    rules
        .validate(&object, old.as_ref())
        .iter()
        .map(|e| e.to_string())
        .collect()
}

/// Evaluates one rule on `spec` (declared with `properties`) and returns whether it held,
/// panicking on anything but a plain pass or fail.
fn holds(properties: Value, rule: &str, spec: Value) -> bool {
    let rules = compile(&spec_schema(properties, json!([{ "rule": rule }])));
    let errs = errors(&rules, json!({ "spec": spec }), None);
    match errs.as_slice() {
        [] => true,
        [one] if one == &format!("spec: Invalid value: \"object\": failed rule: {rule}") => false,
        other => panic!("{rule}: {other:?}"),
    }
}

/// Evaluates a rule on an untyped `spec.v` (any JSON) and returns its errors.
fn on_value(rule: &str, v: Value) -> bool {
    holds(
        json!({"v": {"x-kubernetes-preserve-unknown-fields": true}}),
        rule,
        json!({ "v": v }),
    )
}

fn expr(rule: &str) -> bool {
    holds(json!({}), rule, json!({}))
}

#[test]
fn compiled_rules_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Rules>();
}

#[test]
fn a_schema_without_rules_compiles_to_nothing() {
    let rules = compile(&json!({"type": "object", "properties": {"a": {"type": "string"}}}));
    assert!(rules.is_empty());
    assert!(rules.validate(&json!({"a": "x"}), None).is_empty());
}

#[test]
fn failed_rules_are_reported_at_their_node_with_the_schema_type_as_value() {
    let schema = json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('a')"}],
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {
                        "type": "integer",
                        "x-kubernetes-validations": [{"rule": "self >= 0"}],
                    },
                    "items": {
                        "type": "array",
                        "items": {
                            "type": "string",
                            "x-kubernetes-validations": [{"rule": "self.size() < 3"}],
                        },
                    },
                    "labels": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "string",
                            "x-kubernetes-validations": [{"rule": "self != 'bad'"}],
                        },
                    },
                },
            },
        },
    });
    let rules = compile(&schema);
    assert!(!rules.is_empty());
    let errs = errors(
        &rules,
        json!({
            "apiVersion": "x/v1", "kind": "K", "metadata": {"name": "bob"},
            "spec": {"replicas": -1, "items": ["ok", "long"], "labels": {"a": "bad", "b": "good"}},
        }),
        None,
    );
    assert_eq!(
        errs,
        [
            "<nil>: Invalid value: \"object\": failed rule: self.metadata.name.startsWith('a')",
            "spec.replicas: Invalid value: \"integer\": failed rule: self >= 0",
            "spec.items[1]: Invalid value: \"string\": failed rule: self.size() < 3",
            "spec.labels[a]: Invalid value: \"string\": failed rule: self != 'bad'",
        ]
    );
    let valid = json!({"metadata": {"name": "alice"}, "spec": {"replicas": 1, "items": ["a"], "labels": {"x": "y"}}});
    assert!(errors(&rules, valid, None).is_empty());
}

#[test]
fn message_field_path_and_reason_shape_the_error() {
    let props = json!({"min": {"type": "integer"}, "max": {"type": "integer"}});
    let cases = [
        (
            json!({"rule": "self.min <= self.max", "message": "  min must not exceed max  "}),
            "spec: Invalid value: \"object\": min must not exceed max",
        ),
        (
            json!({"rule": "self.min <= self.max", "fieldPath": ".min", "reason": "FieldValueForbidden", "message": "too big"}),
            "spec.min: Forbidden: too big",
        ),
        (
            json!({"rule": "self.min <= self.max", "fieldPath": "['max']", "reason": "FieldValueRequired"}),
            "spec.max: Required value: failed rule: self.min <= self.max",
        ),
        (
            json!({"rule": "self.min <= self.max", "reason": "FieldValueDuplicate"}),
            "spec: Duplicate value: \"object\"",
        ),
        (
            json!({"rule": "self.min <= self.max", "reason": "FieldValueInvalid", "messageExpression": "'min ' + string(self.min) + ' > max ' + string(self.max)", "message": "fallback"}),
            "spec: Invalid value: \"object\": min 5 > max 1",
        ),
    ];
    for (rule, want) in cases {
        // string(int) has no size bound, so the concatenation is too costly for Kubernetes'
        // estimate: give the numbers a format instead where a messageExpression is used.
        let rule_text = rule.to_string();
        let mut rule = rule;
        if let Some(me) = rule.get("messageExpression") {
            assert!(me.is_string());
            rule["messageExpression"] = json!("'min %d > max %d'.format([self.min, self.max])");
        }
        let rules = compile(&spec_schema(props.clone(), json!([rule])));
        let errs = errors(&rules, json!({"spec": {"min": 5, "max": 1}}), None);
        assert_eq!(errs, [want], "{rule_text}");
        assert!(errors(&rules, json!({"spec": {"min": 1, "max": 5}}), None).is_empty());
    }
}

#[test]
fn the_kind_of_a_reasoned_error_is_the_reason() {
    let rules = compile(&spec_schema(
        json!({"a": {"type": "integer"}}),
        json!([{"rule": "self.a > 0", "reason": "FieldValueForbidden"}]),
    ));
    let errs = rules.validate(&json!({"spec": {"a": 0}}), None);
    assert_eq!(errs[0].kind, FieldErrorKind::Forbidden);
    assert_eq!(errs[0].kind.cause_type(), "FieldValueForbidden");
    assert_eq!(errs[0].field, "spec");
}

#[test]
fn a_message_expression_that_fails_falls_back_to_the_message() {
    let props = json!({"a": {"type": "integer"}, "s": {"type": "string", "maxLength": 10}});
    for me in [
        "self.s",               // absent field: no such key
        "''",                   // empty
        "'line\\nbreak'",       // line breaks are not allowed
        "self.s.substring(20)", // out of range
    ] {
        let rules = compile(&spec_schema(
            props.clone(),
            json!([{"rule": "self.a > 0", "message": "a must be positive", "messageExpression": me}]),
        ));
        assert_eq!(
            errors(&rules, json!({"spec": {"a": 0}}), None),
            ["spec: Invalid value: \"object\": a must be positive"],
            "{me}"
        );
    }
    let rules = compile(&spec_schema(
        props,
        json!([{"rule": "self.a > 0", "messageExpression": "'a is ' + self.s"}]),
    ));
    assert_eq!(
        errors(&rules, json!({"spec": {"a": 0, "s": "zero"}}), None),
        ["spec: Invalid value: \"object\": a is zero"]
    );
}

#[test]
fn runtime_errors_are_reported_as_kubernetes_reports_them() {
    let props = json!({
        "a": {"type": "integer"},
        "l": {"type": "array", "maxItems": 5, "items": {"type": "integer"}},
        "u": {"type": "string", "maxLength": 100},
        "ios": {"x-kubernetes-int-or-string": true},
    });
    let cases = [
        ("self.a == 1", "no such key: a evaluating rule: self.a == 1"),
        ("self.l[3] == 1", "index out of range: 3 evaluating rule: self.l[3] == 1"),
        ("1 / (self.l.size() - 2) == 1", "division by zero evaluating rule: 1 / (self.l.size() - 2) == 1"),
        ("self.l.min() == 0 || true", ""),
        ("url(self.u).getScheme() == 'https'", "URL parse error during conversion from string: parse \"not a url\": invalid URI for request evaluating rule: url(self.u).getScheme() == 'https'"),
        ("self.ios > 5", "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.ios > 5"),
    ];
    for (rule, want) in cases {
        let rules = compile(&spec_schema(props.clone(), json!([{ "rule": rule }])));
        let errs = errors(
            &rules,
            json!({"spec": {"l": [1, 2], "u": "not a url", "ios": "50%"}}),
            None,
        );
        if want.is_empty() {
            assert!(errs.is_empty(), "{rule}: {errs:?}");
        } else {
            assert_eq!(
                errs,
                [format!("spec: Invalid value: \"object\": {want}")],
                "{rule}"
            );
        }
    }
    let rules = compile(&spec_schema(
        props,
        json!([{"rule": "self.l.min() == 0", "message": "needs a zero"}]),
    ));
    assert_eq!(
        errors(&rules, json!({"spec": {"l": []}}), None),
        ["spec: Invalid value: \"object\": min called on empty list evaluating rule: needs a zero"]
    );
}

#[test]
fn transition_rules_see_the_old_value_and_are_skipped_without_one() {
    let props = json!({
        "replicas": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self >= oldSelf", "message": "may not decrease"},
        ]},
        "immutable": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "is immutable"},
        ]},
    });
    let rules = compile(&spec_schema(props, json!([])));
    // Create: no old object, nothing to compare with.
    assert!(errors(
        &rules,
        json!({"spec": {"replicas": 1, "immutable": "a"}}),
        None
    )
    .is_empty());
    // Update.
    let old = json!({"spec": {"replicas": 3, "immutable": "a"}});
    assert_eq!(
        errors(
            &rules,
            json!({"spec": {"replicas": 1, "immutable": "b"}}),
            Some(old.clone())
        ),
        [
            "spec.replicas: Invalid value: \"integer\": may not decrease",
            "spec.immutable: Invalid value: \"string\": is immutable",
        ]
    );
    assert!(errors(
        &rules,
        json!({"spec": {"replicas": 4, "immutable": "a"}}),
        Some(old)
    )
    .is_empty());
    // A field the old object did not have: no old value there.
    let old = json!({"spec": {"replicas": 3}});
    assert!(errors(
        &rules,
        json!({"spec": {"replicas": 4, "immutable": "new"}}),
        Some(old)
    )
    .is_empty());
}

#[test]
fn list_map_items_correlate_by_key_and_map_values_by_name() {
    let schema = spec_schema(
        json!({
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name", "protocol"],
                "items": {
                    "type": "object",
                    "required": ["name", "protocol"],
                    "properties": {
                        "name": {"type": "string"},
                        "protocol": {"type": "string"},
                        "port": {"type": "integer"},
                    },
                    "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}],
                },
            },
            "limits": {
                "type": "object",
                "additionalProperties": {
                    "type": "integer",
                    "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may only grow"}],
                },
            },
        }),
        json!([]),
    );
    let rules = compile(&schema);
    let old = json!({"spec": {
        "ports": [{"name": "a", "protocol": "TCP", "port": 1}, {"name": "b", "protocol": "TCP", "port": 2}],
        "limits": {"x": 5, "y": 5},
    }});
    // Reordered and with a new item: only "b"'s change is compared, by its keys.
    let new = json!({"spec": {
        "ports": [
            {"name": "c", "protocol": "TCP", "port": 9},
            {"name": "b", "protocol": "TCP", "port": 3},
            {"name": "a", "protocol": "UDP", "port": 7},
            {"name": "a", "protocol": "TCP", "port": 1},
        ],
        "limits": {"x": 4, "z": 1},
    }});
    assert_eq!(
        errors(&rules, new, Some(old)),
        [
            "spec.ports[1]: Invalid value: \"object\": port is immutable",
            "spec.limits[x]: Invalid value: \"integer\": may only grow",
        ]
    );
}

#[test]
fn old_self_is_refused_where_old_values_cannot_be_correlated() {
    let schema = spec_schema(
        json!({"list": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"a": {"type": "integer", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}},
            },
        }}),
        json!([]),
    );
    assert_eq!(
        compile_errors(&schema),
        [format!(
            "{ROOT}.properties[spec].properties[list].items.properties[a].x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {ROOT}.properties[spec].properties[list]"
        )]
    );
}

#[test]
fn optional_old_self_runs_on_create_with_an_empty_optional() {
    let schema = spec_schema(
        json!({"name": {"type": "string", "maxLength": 20}}),
        json!([{
            "rule": "!oldSelf.hasValue() || self.name == oldSelf.value().name",
            "optionalOldSelf": true,
            "message": "name is immutable",
        }]),
    );
    let rules = compile(&schema);
    assert!(errors(&rules, json!({"spec": {"name": "a"}}), None).is_empty());
    assert_eq!(
        errors(
            &rules,
            json!({"spec": {"name": "b"}}),
            Some(json!({"spec": {"name": "a"}}))
        ),
        ["spec: Invalid value: \"object\": name is immutable"]
    );
    let unused = spec_schema(
        json!({"name": {"type": "string"}}),
        json!([{"rule": "self.name != ''", "optionalOldSelf": false}]),
    );
    assert_eq!(
        compile_errors(&unused),
        [format!("{ROOT}.properties[spec].x-kubernetes-validations[0].optionalOldSelf: Invalid value: false: may not be set if oldSelf is not used in rule")]
    );
}

#[test]
fn compile_errors_are_reported_at_the_rule_as_kubernetes_words_them() {
    let props = json!({"replicas": {"type": "integer"}, "name": {"type": "string"}});
    let at = format!("{ROOT}.properties[spec].x-kubernetes-validations[0]");
    let value = |rule: &str| {
        format!(
            "apiextensions.ValidationRule{{Rule:{:?}, Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}",
            rule
        )
    };
    let cases = [
        (
            "self.replicas >",
            "compilation failed: ERROR: <input>:1:16: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | self.replicas >\n | ...............^",
        ),
        (
            "self.replica > 1",
            "compilation failed: ERROR: <input>:1:5: undefined field 'replica'\n | self.replica > 1\n | ....^",
        ),
        (
            "self.name == 1",
            "compilation failed: ERROR: <input>:1:11: found no matching overload for '_==_' applied to '(string, int)'\n | self.name == 1\n | ..........^",
        ),
        (
            "frobnicate(self.name)",
            "compilation failed: ERROR: <input>:1:11: undeclared reference to 'frobnicate' (in container '')\n | frobnicate(self.name)\n | ..........^",
        ),
        ("self.replicas + 1", "cel expression must evaluate to a bool"),
    ];
    for (rule, detail) in cases {
        let errs = compile_errors(&spec_schema(props.clone(), json!([{ "rule": rule }])));
        assert_eq!(
            errs,
            [format!(
                "{at}.rule: Invalid value: {}: {detail}",
                value(rule)
            )],
            "{rule}"
        );
    }
}

#[test]
fn rule_declarations_are_checked_before_compiling() {
    let props = json!({"a": {"type": "integer"}, "m": {"type": "object", "additionalProperties": {"type": "string"}}});
    let at = format!("{ROOT}.properties[spec].x-kubernetes-validations");
    let cases = [
        (json!({"rule": "  "}), format!("{at}[0].rule: Required value: rule is not specified")),
        (
            json!({"rule": "self.a > 0", "reason": "FieldValueTooLong"}),
            format!("{at}[0].reason: Unsupported value: \"FieldValueTooLong\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""),
        ),
        (
            json!({"rule": "self.a > 0", "fieldPath": ".b"}),
            format!("{at}[0].fieldPath: Invalid value: \".b\": fieldPath must be a valid path"),
        ),
        (
            json!({"rule": "self.a > 0", "message": "two\nlines"}),
            format!("{at}[0].message: Invalid value: \"two\\nlines\": message must not contain line breaks"),
        ),
        (
            json!({"rule": "self.a > 0 &&\nself.a < 9"}),
            format!("{at}[0].message: Required value: message must be specified if rule contains line breaks"),
        ),
        (
            json!({"rule": "self.a > 0", "messageExpression": " "}),
            format!("{at}[0].messageExpression: Required value: messageExpression must be non-empty if specified"),
        ),
    ];
    for (rule, want) in cases {
        assert_eq!(
            compile_errors(&spec_schema(props.clone(), json!([rule.clone()]))),
            [want],
            "{rule}"
        );
    }
    // Valid paths into maps and with quoted names compile.
    compile(&spec_schema(
        props,
        json!([
            {"rule": "true", "fieldPath": ".m.anything"},
            {"rule": "true", "fieldPath": ".m['a.b']"},
            {"rule": "true", "fieldPath": "['a']"},
        ]),
    ));
}

#[test]
fn message_expressions_must_compile_to_strings() {
    let props = json!({"a": {"type": "integer"}});
    let at = format!("{ROOT}.properties[spec].x-kubernetes-validations[0].messageExpression");
    let errs = compile_errors(&spec_schema(
        props.clone(),
        json!([{"rule": "self.a > 0", "messageExpression": "self.a"}]),
    ));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with(&format!(
            "{at}: Invalid value: apiextensions.ValidationRule{{"
        )),
        "{errs:?}"
    );
    assert!(
        errs[0].ends_with(": messageExpression must evaluate to a string"),
        "{errs:?}"
    );
    let errs = compile_errors(&spec_schema(
        props,
        json!([{"rule": "self.a > 0", "messageExpression": "'a' +"}]),
    ));
    assert!(
        errs[0]
            .contains(": messageExpression compilation failed: ERROR: <input>:1:6: Syntax error"),
        "{errs:?}"
    );
}

#[test]
fn values_have_kubernetes_types() {
    let props = json!({
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "d": {"type": "string", "format": "duration"},
        "t": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "raw": {"type": "string", "format": "byte"},
        "ios": {"x-kubernetes-int-or-string": true},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "opt": {"type": "string"},
        "x-dashed": {"type": "string"},
        "namespace": {"type": "string"},
    });
    let spec = json!({
        "i": 3, "n": 2, "b": true, "d": "1m30s", "t": "2024-05-06T07:08:09Z", "day": "2024-05-06",
        "raw": "aGVsbG8=", "ios": "25%", "free": {"anything": [1, {"goes": "here"}]},
        "x-dashed": "d", "namespace": "ns",
    });
    for rule in [
        "type(self.i) == int && self.i == 3",
        "type(self.n) == double && self.n == 2.0",
        "self.b",
        "self.d == duration('90s')",
        "self.t.getFullYear() == 2024 && self.t < timestamp('2025-01-01T00:00:00Z')",
        "self.day.getDate() == 6 && self.day.getDayOfMonth() == 5",
        "self.raw == b'hello'",
        "type(self.ios) == string && self.ios.endsWith('%')",
        "self.free.anything[1].goes == 'here' && self.free.anything[0] == 1",
        "!has(self.opt) && has(self.i)",
        "self.x__dash__dashed == 'd' && self.__namespace__ == 'ns'",
    ] {
        assert!(holds(props.clone(), rule, spec.clone()), "{rule}");
    }
    assert!(holds(
        props.clone(),
        "type(self.ios) == int && self.ios > 2",
        json!({"ios": 5})
    ));
}

#[test]
fn the_resource_root_exposes_api_version_kind_and_some_metadata() {
    let schema = json!({
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.apiVersion == 'example.com/v1' && self.kind == 'Widget'"},
            {"rule": "self.metadata.name.size() <= 10"},
        ],
    });
    let rules = compile(&schema);
    let object = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "short", "labels": {"a": "b"}}});
    assert!(errors(&rules, object, None).is_empty());
    let errs = compile_errors(&json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.labels.size() > 0"}],
    }));
    assert!(errs[0].contains("undefined field 'labels'"), "{errs:?}");
}

#[test]
fn the_standard_library_and_macros() {
    for rule in [
        "[1, 2, 3].all(x, x > 0)",
        "[1, 2, 3].exists(x, x == 2)",
        "[1, 2, 3].exists_one(x, x == 2)",
        "[1, 2, 3].map(x, x * 2) == [2, 4, 6]",
        "[1, 2, 3].filter(x, x > 1) == [2, 3]",
        "{'a': 1}.all(k, k == 'a')",
        "size('héllo') == 5 && 'héllo'.size() == 5",
        "'abc'.startsWith('ab') && 'abc'.endsWith('bc') && 'abc'.contains('b')",
        "'abc'.matches('^a.c$') && matches('abc', 'b')",
        "2 in [1, 2] && 'a' in {'a': 1}",
        "int('42') == 42 && string(42) == '42' && double(1) == 1.0 && uint(1) == 1u",
        "duration('1h') + duration('30m') == duration('90m')",
        "timestamp('2024-01-01T00:00:00Z') + duration('24h') == timestamp('2024-01-02T00:00:00Z')",
        "1 < 1.5 && 2u > 1",
        "true ? true : false",
        "optional.of(1).hasValue() && !optional.none().hasValue()",
        "optional.none().orValue(5) == 5",
        "{'a': {'b': 1}}.?a.b.orValue(0) == 1 && {'a': {'b': 1}}.?c.b.orValue(0) == 0",
        "dyn(1) == 1",
    ] {
        assert!(expr(rule), "{rule}");
    }
}

#[test]
fn the_strings_library() {
    for rule in [
        "'hello'.charAt(1) == 'e'",
        "'hello'.indexOf('l') == 2 && 'hello'.lastIndexOf('l') == 3",
        "'hello'.indexOf('l', 3) == 3",
        "'HeLLo'.lowerAscii() == 'hello' && 'hello'.upperAscii() == 'HELLO'",
        "'a-b-c'.replace('-', '+') == 'a+b+c' && 'a-b-c'.replace('-', '+', 1) == 'a+b-c'",
        "'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']",
        "'hello'.substring(1) == 'ello' && 'hello'.substring(1, 3) == 'el'",
        "'  hi  '.trim() == 'hi'",
        "['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b'",
        "'%s is %d'.format(['x', 3]) == 'x is 3'",
        "strings.quote('a\"b') == '\"a\\\\\"b\"'",
    ] {
        assert!(expr(rule), "{rule}");
    }
}

#[test]
fn the_lists_library() {
    for rule in [
        "[1, 2, 2, 3].isSorted() && !['b', 'a'].isSorted() && [].isSorted()",
        "[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [duration('1m'), duration('1s')].sum() == duration('61s')",
        "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'",
        "[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2 && [1].indexOf(5) == -1",
        "sets.contains([1, 2, 3], [1, 3]) && !sets.contains([1], [2])",
        "sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1, 2], [2, 5])",
    ] {
        assert!(expr(rule), "{rule}");
    }
    // On schema lists too.
    let props = json!({"l": {"type": "array", "maxItems": 10, "items": {"type": "integer"}}});
    assert!(holds(
        props.clone(),
        "self.l.isSorted() && self.l.sum() == 6",
        json!({"l": [1, 2, 3]})
    ));
    assert!(!holds(props, "self.l.isSorted()", json!({"l": [3, 2]})));
}

#[test]
fn the_regex_library() {
    for rule in [
        "'abc 123 def 456'.find('[0-9]+') == '123'",
        "'abc'.find('[0-9]+') == ''",
        "'abc 123 def 456'.findAll('[0-9]+') == ['123', '456']",
        "'abc 123 def 456'.findAll('[0-9]+', 1) == ['123']",
    ] {
        assert!(expr(rule), "{rule}");
    }
    let errs = compile_errors(&spec_schema(
        json!({}),
        json!([{"rule": "'a'.matches('(')"}]),
    ));
    assert!(
        errs[0].ends_with("compilation failed: ERROR: <input>:1:13: invalid matches argument\n | 'a'.matches('(')\n | ............^"),
        "{errs:?}"
    );
    // A bad pattern that is not a literal fails when evaluated.
    let rules = compile(&spec_schema(
        json!({"p": {"type": "string", "maxLength": 10}}),
        json!([{"rule": "'a'.find(self.p) == ''"}]),
    ));
    let errs = errors(&rules, json!({"spec": {"p": "("}}), None);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].contains("error parsing regexp"), "{errs:?}");
}

#[test]
fn literals_are_validated_as_kubernetes_does() {
    for (rule, detail) in [
        (
            "duration('1x') > duration('1s')",
            "1:10: invalid duration argument",
        ),
        (
            "timestamp('yesterday') < timestamp('2024-01-01T00:00:00Z')",
            "1:11: invalid timestamp argument",
        ),
        (
            "[1, 'a'].size() == 2",
            "1:5: expected type 'int' but found 'string'",
        ),
        (
            "{'a': 1, 'b': 'x'}.size() == 2",
            "1:15: expected type 'int' but found 'string'",
        ),
    ] {
        let errs = compile_errors(&spec_schema(json!({}), json!([{ "rule": rule }])));
        assert_eq!(errs.len(), 1, "{rule}: {errs:?}");
        assert!(
            errs[0].contains(&format!("compilation failed: ERROR: <input>:{detail}")),
            "{rule}: {errs:?}"
        );
    }
}

#[test]
fn the_url_library() {
    for rule in [
        "url('https://example.com:8080/a/b?x=1&x=2').getScheme() == 'https'",
        "url('https://example.com:8080/a/b').getHost() == 'example.com:8080'",
        "url('https://[::1]:8080/').getHostname() == '::1'",
        "url('https://example.com:8080/').getPort() == '8080'",
        "url('https://example.com/a%20b').getEscapedPath() == '/a%20b'",
        "url('https://example.com/?x=1&x=2&y=z').getQuery() == {'x': ['1', '2'], 'y': ['z']}",
        "url('/relative/path').getHost() == ''",
        "isURL('https://example.com') && !isURL('not a url') && !isURL('example.com')",
    ] {
        assert!(expr(rule), "{rule}");
    }
}

#[test]
fn the_quantity_library() {
    for rule in [
        "quantity('1Gi').isGreaterThan(quantity('1G'))",
        "quantity('500m').isLessThan(quantity('1'))",
        "quantity('1').compareTo(quantity('1000m')) == 0",
        "quantity('2k').asInteger() == 2000 && quantity('1.5').asApproximateFloat() == 1.5",
        "quantity('1.5').isInteger() == false && quantity('3').isInteger()",
        "quantity('1').add(quantity('500m')).compareTo(quantity('1.5')) == 0",
        "quantity('1').add(2).compareTo(quantity('3')) == 0 && quantity('1').sub(1).sign() == 0",
        "quantity('-3').sign() == -1",
        "isQuantity('100Mi') && !isQuantity('100MB') && !isQuantity('')",
    ] {
        assert!(expr(rule), "{rule}");
    }
    let props = json!({"mem": {"type": "string", "maxLength": 20}});
    assert!(holds(
        props.clone(),
        "quantity(self.mem).isLessThan(quantity('1Gi'))",
        json!({"mem": "512Mi"})
    ));
    assert!(!holds(
        props,
        "quantity(self.mem).isLessThan(quantity('1Gi'))",
        json!({"mem": "2Gi"})
    ));
}

#[test]
fn nested_loops_over_unbounded_lists_are_refused_when_the_crd_is_written() {
    let unbounded = spec_schema(
        json!({"tags": {"type": "array", "items": {"type": "string"}}}),
        json!([{"rule": "self.tags.all(x, self.tags.all(y, x == y))"}]),
    );
    let at = format!("{ROOT}.properties[spec].x-kubernetes-validations[0].rule");
    assert_eq!(
        compile_errors(&unbounded),
        [
            format!("{at}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
            format!("{at}: Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"),
            format!("{ROOT}: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
        ]
    );
    // With bounds the same rule is affordable.
    let bounded = spec_schema(
        json!({"tags": {"type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 63}}}),
        json!([{"rule": "self.tags.all(x, self.tags.all(y, x == y))"}]),
    );
    compile(&bounded);
}

#[test]
fn estimates_match_kubernetes_to_the_unit() {
    // `all` over strings of maxLength 16 with `contains`: 11 per element plus 2, so 909,090
    // elements fit in the 10,000,000 limit and one more does not, as on a real apiserver.
    let schema = |max_items: u64| {
        spec_schema(
            json!({"tags": {"type": "array", "maxItems": max_items, "items": {"type": "string", "maxLength": 16}}}),
            json!([{"rule": "self.tags.all(x, x.contains('gpu'))"}]),
        )
    };
    compile(&schema(909_090));
    let errs = compile_errors(&schema(909_091));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].contains("Forbidden: estimated rule cost exceeds budget by factor of 1.000000x"),
        "{errs:?}"
    );
}

#[test]
fn a_rule_under_unbounded_lists_counts_once_per_possible_element() {
    // Cheap per element, but there can be a million elements.
    let schema = spec_schema(
        json!({"items": {"type": "array", "items": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+(-[a-z]+)*$')"}],
        }}}),
        json!([]),
    );
    let errs = compile_errors(&schema);
    assert!(
        errs[0].ends_with("x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
        "{errs:?}"
    );
    let bounded = spec_schema(
        json!({"items": {"type": "array", "maxItems": 100, "items": {
            "type": "string", "maxLength": 64,
            "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+(-[a-z]+)*$')"}],
        }}}),
        json!([]),
    );
    compile(&bounded);
}

#[test]
fn an_expensive_rule_over_a_large_list_is_refused_before_it_runs() {
    // 1000 × 1000 comparisons: within the CRD's estimate, beyond one call's limit.
    let schema = spec_schema(
        json!({"l": {"type": "array", "maxItems": 1000, "items": {"type": "integer"}}}),
        json!([{"rule": "self.l.all(x, self.l.all(y, x == y || x != y))", "message": "quadratic"}]),
    );
    let rules = compile(&schema);
    let big: Vec<i64> = (0..1000).collect();
    let started = Instant::now();
    let errs = errors(&rules, json!({"spec": {"l": big}}), None);
    assert_eq!(
        errs,
        ["spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: quadratic"]
    );
    // Refused, not run: a million evaluations of the body would take far longer than the
    // estimate (this is a sanity bound, not a performance assertion).
    assert!(started.elapsed().as_secs() < 5);
    // The same rule on a small list runs.
    assert!(errors(&rules, json!({"spec": {"l": [1, 2, 3]}}), None).is_empty());
}

/// Up to 100 rows of up to 100 integers, with three quadratic rules on each row. Each rule is
/// affordable for the CRD (about 5,000,000 when every list is full) and each evaluation for one
/// call, but their estimates together exceed an object's budget.
fn rules_over_rows() -> Rules {
    let rule = |op: &str| json!({"rule": format!("self.all(x, self.exists(y, y {op} x))")});
    let schema = spec_schema(
        json!({"rows": {"type": "array", "maxItems": 100, "items": {
            "type": "array", "maxItems": 100, "items": {"type": "integer"},
            "x-kubernetes-validations": [rule("=="), rule(">="), rule("<=")],
        }}}),
        json!([]),
    );
    compile(&schema)
}

#[test]
fn the_object_budget_stops_validation() {
    // Full rows exceed the object's budget.
    let rules = rules_over_rows();
    let row: Vec<i64> = (0..100).map(|i| i % 3).collect();
    let rows: Vec<Value> = (0..100).map(|_| json!(row)).collect();
    let errs = errors(&rules, json!({"spec": {"rows": rows}}), None);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].ends_with(": Invalid value: \"array\": validation failed due to running out of cost budget, no further validation rules will be run"),
        "{errs:?}"
    );
    assert!(errs[0].starts_with("spec.rows["), "{errs:?}");
    // Fewer rows fit.
    let rows: Vec<Value> = (0..10).map(|_| json!(row)).collect();
    assert!(errors(&rules, json!({"spec": {"rows": rows}}), None).is_empty());
}

#[test]
fn the_object_budget_is_charged_for_the_actual_sizes() {
    // 100 short rows: the rules' estimates (full rows) add up to more than the object's
    // budget, what these rows can cost does not, and the object is accepted.
    let rules = rules_over_rows();
    let rows: Vec<Value> = (0..100).map(|i| json!([i, i + 1])).collect();
    assert!(errors(&rules, json!({"spec": {"rows": rows}}), None).is_empty());
}

#[test]
fn untyped_values_are_dyn() {
    assert!(on_value("self.v.a == 1", json!({"a": 1})));
    assert!(on_value("self.v[1] == 'x'", json!([0, "x"])));
    assert!(!on_value("has(self.v.missing)", json!({"a": 1})));
    // Objects that keep unknown fields are maps; bounded, they can be iterated.
    let free = json!({"m": {"type": "object", "maxProperties": 10, "x-kubernetes-preserve-unknown-fields": true}});
    assert!(holds(
        free.clone(),
        "self.m.exists(k, k == 'b') && self.m.b == 2",
        json!({"m": {"a": 1, "b": 2}})
    ));
    assert!(!holds(
        free,
        "self.m.all(k, k == 'b')",
        json!({"m": {"a": 1, "b": 2}})
    ));
}

#[test]
fn stored_schemas_compile_what_compiles_and_report_the_rest() {
    // Accepted once (by another version, say), refused by today's checks: still served.
    let schema = spec_schema(
        json!({"a": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}),
        json!([
            {"rule": "self.a > 0", "message": "a must be positive"},
            {"rule": "self.nope == 1"},
            {"rule": "self.tags.all(x, self.tags.all(y, x == y)) || true"},
        ]),
    );
    assert!(!compile_errors(&schema).is_empty());
    let rules = Rules::compile_stored(&schema);
    let errs = errors(&rules, json!({"spec": {"a": 0, "tags": ["a"]}}), None);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(
        errs[0],
        "spec: Invalid value: \"object\": a must be positive"
    );
    assert!(
        errs[1].starts_with("spec: Invalid value: \"object\": rule compile error: compilation failed: ERROR: <input>:1:5: undefined field 'nope'"),
        "{errs:?}"
    );
}

#[test]
fn failures_on_values_an_update_leaves_alone_are_ratcheted_to_warnings() {
    let schema = spec_schema(
        json!({
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() <= 5", "message": "too long"}]},
            "tags": {
                "type": "array",
                "x-kubernetes-list-type": "set",
                "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'bad'"}]},
            },
            "size": {"type": "integer"},
        }),
        json!([]),
    );
    let rules = compile(&schema);
    let old = json!({"spec": {"name": "toolong", "tags": ["bad", "ok"], "size": 1}});
    // Only `size` changes: the old violations stay, as warnings.
    let new = json!({"spec": {"name": "toolong", "tags": ["ok", "bad"], "size": 2}});
    let outcome = rules.evaluate(&new, Some(&old));
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(
        outcome.warnings,
        [
            "spec.name: Invalid value: \"string\": too long",
            "spec.tags[1]: Invalid value: \"string\": failed rule: self != 'bad'",
        ]
    );
    // Changing the offending value makes it an error again; so does creating it.
    let changed = json!({"spec": {"name": "toolong!", "tags": ["bad", "ok"], "size": 1}});
    assert_eq!(
        errors(&rules, changed, Some(old.clone())),
        ["spec.name: Invalid value: \"string\": too long"]
    );
    assert_eq!(errors(&rules, new, None).len(), 2);
}

#[test]
fn the_ip_and_cidr_libraries() {
    for rule in [
        "isIP('10.0.0.1') && isIP('2001:db8::1') && !isIP('10.0.0.256') && !isIP('::ffff:1.2.3.4')",
        "ip('10.0.0.1').family() == 4 && ip('::1').family() == 6",
        "ip('127.0.0.1').isLoopback() && ip('0.0.0.0').isUnspecified()",
        "ip('169.254.169.254').isLinkLocalUnicast() && ip('ff02::1').isLinkLocalMulticast()",
        "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()",
        "ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')",
        "string(ip('2001:DB8:0::1')) == '2001:db8::1'",
        "isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0/33') && !isCIDR('10.0.0.0')",
        "cidr('10.0.0.0/8').containsIP('10.1.2.3') && cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))",
        "!cidr('10.0.0.0/8').containsIP('11.0.0.1')",
        "cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16') && !cidr('10.1.0.0/16').containsCIDR('10.0.0.0/8')",
        "string(cidr('10.1.2.3/8').ip()) == '10.1.2.3' && string(cidr('10.1.2.3/8').masked()) == '10.0.0.0/8'",
        "cidr('2001:db8::/32').prefixLength() == 32",
    ] {
        assert!(expr(rule), "{rule}");
    }
    // Opaque values have no size for the estimator: comparing them is priced as unbounded,
    // as on a real apiserver.
    let errs = compile_errors(&spec_schema(
        json!({}),
        json!([{"rule": "ip('10.0.0.1') == ip('10.0.0.1')"}]),
    ));
    assert!(
        errs[0].contains("estimated rule cost exceeds budget"),
        "{errs:?}"
    );
    let props = json!({"addr": {"type": "string", "maxLength": 45}});
    assert!(holds(
        props.clone(),
        "isIP(self.addr) && ip(self.addr).family() == 4",
        json!({"addr": "192.168.1.1"})
    ));
    assert!(!holds(props, "isIP(self.addr)", json!({"addr": "nope"})));
}

#[test]
fn set_and_map_lists_compare_as_kubernetes_compares_them() {
    let schema = spec_schema(
        json!({
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "port": {"type": "integer"},
                    "hosts": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                }},
            },
            "order": {"type": "array", "items": {"type": "string"}},
        }),
        json!([
            {"rule": "self == oldSelf", "message": "spec is immutable"},
            {"rule": "!(self.tags != oldSelf.tags)", "message": "tags are immutable"},
        ]),
    );
    let rules = compile(&schema);
    let old = json!({"spec": {
        "tags": ["a", "b"],
        "ports": [{"name": "x", "port": 1, "hosts": ["h1", "h2"]}, {"name": "y", "port": 2}],
        "order": ["1", "2"],
    }});
    // Reordered sets and map lists (nested ones too) are the same value.
    let reordered = json!({"spec": {
        "tags": ["b", "a"],
        "ports": [{"name": "y", "port": 2}, {"name": "x", "port": 1, "hosts": ["h2", "h1"]}],
        "order": ["1", "2"],
    }});
    assert!(errors(&rules, reordered, Some(old.clone())).is_empty());
    // An atomic list keeps its order; a changed item is a change.
    let atomic = json!({"spec": {"tags": ["a", "b"], "ports": old["spec"]["ports"].clone(), "order": ["2", "1"]}});
    assert_eq!(
        errors(&rules, atomic, Some(old.clone())),
        ["spec: Invalid value: \"object\": spec is immutable"]
    );
    let changed = json!({"spec": {"tags": ["a", "c"], "ports": [{"name": "x", "port": 9, "hosts": ["h1", "h2"]}, {"name": "y", "port": 2}], "order": ["1", "2"]}});
    assert_eq!(
        errors(&rules, changed, Some(old)),
        [
            "spec: Invalid value: \"object\": spec is immutable",
            "spec: Invalid value: \"object\": tags are immutable",
        ]
    );
}
