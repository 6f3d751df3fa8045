//! The CEL environment of `x-kubernetes-validations`: cel-rust's standard library and strings
//! extension, plus the Kubernetes libraries rules commonly use that cel-rust lacks: lists
//! (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`), regex (`find`, `findAll`),
//! URLs (`url`, `isURL` and the accessors), quantities (`quantity`, `isQuantity`, comparison
//! and arithmetic) and sets (`sets.contains`, `sets.equivalent`, `sets.intersects`).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use cel::common::functions::Function;
use cel::common::types::{Type, DYN_TYPE, INT_TYPE, LIST_TYPE, STRING_TYPE};
use cel::common::value::{CowVal, Val};
use cel::objects::{Key, Map, Opaque};
use cel::{Env, ExecutionError, Value};

use super::net::{Cidr, Ip};
use super::quantity::Quantity;
use super::ty::{Assoc, EqShape};
use super::url::Url;

/// The name `matches` calls are redirected to: the same function, with compiled patterns
/// cached (cel-rust's own compiles the pattern on every call).
pub(crate) const CACHED_MATCHES: &str = "@matches";

/// The comparison `==`/`!=` calls on values holding set or map lists are redirected to:
/// `@equals(a, b, shape)`, `shape` an index into the registered [`EqShape`]s.
pub(crate) const SHAPED_EQUALS: &str = "@equals";

const URL_TYPE: &str = "kubernetes.URL";
const QUANTITY_TYPE: &str = "kubernetes.Quantity";
const IP_TYPE: &str = "net.IP";
const CIDR_TYPE: &str = "net.CIDR";

/// The shared environment (built once).
pub(crate) fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| Arc::new(build().expect("the CEL library declarations are consistent")))
        .clone()
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        URL_TYPE
    }
}

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        QUANTITY_TYPE
    }
}

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        IP_TYPE
    }
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        CIDR_TYPE
    }
}

type Imp = fn(&[Value]) -> Result<Value, ExecutionError>;

/// Runs a library function on owned [`Value`]s: simple, and the copies are linear in the
/// arguments, which the functions traverse anyway.
fn run<'b, 'v>(args: Vec<CowVal<'b, 'v>>, imp: Imp) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let values = args
        .iter()
        .map(|a| Value::try_from(a.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let out: Box<dyn Val> = imp(&values)?.try_into()?;
    Ok(CowVal::Owned(out))
}

macro_rules! overload {
    ($imp:path) => {{
        fn f<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            run(args, $imp)
        }
        f as Function
    }};
}

fn build() -> Result<Env, cel::DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    let url = Type::new_opaque_type(URL_TYPE);
    let quantity = Type::new_opaque_type(QUANTITY_TYPE);
    env.add_type(url.to_owned())?;
    env.add_type(quantity.to_owned())?;

    // Lists.
    for (name, imp) in [
        ("isSorted", overload!(is_sorted)),
        ("sum", overload!(sum)),
        ("min", overload!(list_min)),
        ("max", overload!(list_max)),
    ] {
        env.add_member_overload(name, &format!("list_{name}"), LIST_TYPE, vec![], imp)?;
    }
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        overload!(list_index_of),
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST_TYPE,
        vec![DYN_TYPE],
        overload!(list_last_index_of),
    )?;

    // Regex.
    env.add_overload(
        CACHED_MATCHES,
        "matches_cached",
        vec![STRING_TYPE, STRING_TYPE],
        overload!(matches),
    )?;
    env.add_member_overload(
        CACHED_MATCHES,
        "string_matches_cached",
        STRING_TYPE,
        vec![STRING_TYPE],
        overload!(matches),
    )?;
    env.add_member_overload(
        "find",
        "string_find_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        overload!(find),
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string",
        STRING_TYPE,
        vec![STRING_TYPE],
        overload!(find_all),
    )?;
    env.add_member_overload(
        "findAll",
        "string_find_all_string_int",
        STRING_TYPE,
        vec![STRING_TYPE, INT_TYPE],
        overload!(find_all_n),
    )?;

    // URLs.
    env.add_overload("url", "string_to_url", vec![STRING_TYPE], overload!(to_url))?;
    env.add_overload(
        "isURL",
        "is_url_string",
        vec![STRING_TYPE],
        overload!(is_url),
    )?;
    for (name, imp) in [
        ("getScheme", overload!(url_scheme)),
        ("getHost", overload!(url_host)),
        ("getHostname", overload!(url_hostname)),
        ("getPort", overload!(url_port)),
        ("getEscapedPath", overload!(url_escaped_path)),
        ("getQuery", overload!(url_query)),
    ] {
        env.add_member_overload(name, &format!("url_{name}"), url.to_owned(), vec![], imp)?;
    }

    // Quantities.
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        overload!(to_quantity),
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        overload!(is_quantity),
    )?;
    for (name, imp) in [
        ("sign", overload!(q_sign)),
        ("isInteger", overload!(q_is_integer)),
        ("asInteger", overload!(q_as_integer)),
        ("asApproximateFloat", overload!(q_as_float)),
    ] {
        env.add_member_overload(
            name,
            &format!("quantity_{name}"),
            quantity.to_owned(),
            vec![],
            imp,
        )?;
    }
    for (name, imp) in [
        ("isGreaterThan", overload!(q_greater)),
        ("isLessThan", overload!(q_less)),
        ("compareTo", overload!(q_compare)),
        ("add", overload!(q_add)),
        ("sub", overload!(q_sub)),
    ] {
        env.add_member_overload(
            name,
            &format!("quantity_{name}_quantity"),
            quantity.to_owned(),
            vec![quantity.to_owned()],
            imp,
        )?;
    }
    for (name, imp) in [("add", overload!(q_add)), ("sub", overload!(q_sub))] {
        env.add_member_overload(
            name,
            &format!("quantity_{name}_int"),
            quantity.to_owned(),
            vec![INT_TYPE],
            imp,
        )?;
    }

    // IP addresses and CIDRs.
    let ip = Type::new_opaque_type(IP_TYPE);
    let cidr = Type::new_opaque_type(CIDR_TYPE);
    env.add_type(ip.to_owned())?;
    env.add_type(cidr.to_owned())?;
    env.add_overload("ip", "string_to_ip", vec![STRING_TYPE], overload!(to_ip))?;
    env.add_overload("isIP", "is_ip", vec![STRING_TYPE], overload!(is_ip))?;
    env.add_overload(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        overload!(ip_is_canonical),
    )?;
    env.add_overload(
        "string",
        "ip_to_string",
        vec![ip.to_owned()],
        overload!(net_to_string),
    )?;
    for (name, imp) in [
        ("family", overload!(ip_family)),
        ("isUnspecified", overload!(ip_is_unspecified)),
        ("isLoopback", overload!(ip_is_loopback)),
        (
            "isLinkLocalMulticast",
            overload!(ip_is_link_local_multicast),
        ),
        ("isLinkLocalUnicast", overload!(ip_is_link_local_unicast)),
        ("isGlobalUnicast", overload!(ip_is_global_unicast)),
    ] {
        env.add_member_overload(name, &format!("ip_{name}"), ip.to_owned(), vec![], imp)?;
    }
    env.add_overload(
        "cidr",
        "string_to_cidr",
        vec![STRING_TYPE],
        overload!(to_cidr),
    )?;
    env.add_overload("isCIDR", "is_cidr", vec![STRING_TYPE], overload!(is_cidr))?;
    env.add_overload(
        "string",
        "cidr_to_string",
        vec![cidr.to_owned()],
        overload!(net_to_string),
    )?;
    for (name, imp) in [
        ("ip", overload!(cidr_ip)),
        ("masked", overload!(cidr_masked)),
        ("prefixLength", overload!(cidr_prefix_length)),
    ] {
        env.add_member_overload(name, &format!("cidr_{name}"), cidr.to_owned(), vec![], imp)?;
    }
    for (arg, suffix) in [(STRING_TYPE, "string"), (ip.to_owned(), "ip")] {
        env.add_member_overload(
            "containsIP",
            &format!("cidr_contains_ip_{suffix}"),
            cidr.to_owned(),
            vec![arg],
            overload!(cidr_contains_ip),
        )?;
    }
    for (arg, suffix) in [(STRING_TYPE, "string"), (cidr.to_owned(), "cidr")] {
        env.add_member_overload(
            "containsCIDR",
            &format!("cidr_contains_cidr_{suffix}"),
            cidr.to_owned(),
            vec![arg],
            overload!(cidr_contains_cidr),
        )?;
    }

    env.add_overload(
        SHAPED_EQUALS,
        "shaped_equals",
        vec![DYN_TYPE, DYN_TYPE, INT_TYPE],
        overload!(shaped_equals),
    )?;

    // Sets.
    for (name, imp) in [
        ("sets.contains", overload!(sets_contains)),
        ("sets.equivalent", overload!(sets_equivalent)),
        ("sets.intersects", overload!(sets_intersects)),
    ] {
        env.add_overload(
            name,
            &format!("list_{name}"),
            vec![LIST_TYPE, LIST_TYPE],
            imp,
        )?;
    }
    Ok(env)
}

fn err(function: &str, msg: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, msg)
}

fn list<'a>(v: &'a Value, function: &str) -> Result<&'a [Value], ExecutionError> {
    match v {
        Value::List(l) => Ok(l.as_slice()),
        other => Err(ExecutionError::no_such_member_overload(
            function,
            vec![other.type_of().to_string()],
        )),
    }
}

fn string<'a>(v: &'a Value, function: &str) -> Result<&'a str, ExecutionError> {
    match v {
        Value::String(s) => Ok(s.as_str()),
        other => Err(ExecutionError::no_such_overload(
            function,
            vec![other.type_of().to_string()],
        )),
    }
}

fn str_value(s: impl Into<String>) -> Value {
    Value::String(Arc::new(s.into()))
}

/// CEL ordering of two values of a comparable type (numbers across types, strings, bytes,
/// bools, durations, timestamps).
fn compare(a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    use Value::*;
    let ord = match (a, b) {
        (Int(x), Int(y)) => Some(x.cmp(y)),
        (UInt(x), UInt(y)) => Some(x.cmp(y)),
        (Float(x), Float(y)) => x.partial_cmp(y),
        (Int(x), UInt(y)) => Some(if *x < 0 {
            Ordering::Less
        } else {
            (*x as u64).cmp(y)
        }),
        (UInt(x), Int(y)) => Some(if *y < 0 {
            Ordering::Greater
        } else {
            x.cmp(&(*y as u64))
        }),
        (Int(x), Float(y)) => (*x as f64).partial_cmp(y),
        (Float(x), Int(y)) => x.partial_cmp(&(*y as f64)),
        (UInt(x), Float(y)) => (*x as f64).partial_cmp(y),
        (Float(x), UInt(y)) => x.partial_cmp(&(*y as f64)),
        (String(x), String(y)) => Some(x.cmp(y)),
        (Bytes(x), Bytes(y)) => Some(x.cmp(y)),
        (Bool(x), Bool(y)) => Some(x.cmp(y)),
        (Duration(x), Duration(y)) => Some(x.cmp(y)),
        (Timestamp(x), Timestamp(y)) => Some(x.cmp(y)),
        _ => None,
    };
    ord.ok_or_else(|| {
        ExecutionError::no_such_overload(
            "_<_",
            vec![a.type_of().to_string(), b.type_of().to_string()],
        )
    })
}

fn is_sorted(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list(&args[0], "isSorted")?;
    for w in items.windows(2) {
        if compare(&w[0], &w[1])? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
}

fn sum(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list(&args[0], "sum")?;
    let Some(first) = items.first() else {
        return Ok(Value::Int(0));
    };
    let mut acc = first.clone();
    for v in &items[1..] {
        acc = match (&acc, v) {
            (Value::Int(a), Value::Int(b)) => Value::Int(
                a.checked_add(*b)
                    .ok_or_else(|| err("sum", "integer overflow"))?,
            ),
            (Value::UInt(a), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| err("sum", "unsigned integer overflow"))?,
            ),
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => Value::Duration(
                a.checked_add(b)
                    .ok_or_else(|| err("sum", "duration overflow"))?,
            ),
            (a, b) => {
                return Err(ExecutionError::no_such_overload(
                    "_+_",
                    vec![a.type_of().to_string(), b.type_of().to_string()],
                ))
            }
        };
    }
    Ok(acc)
}

fn extreme(args: &[Value], name: &str, keep: Ordering) -> Result<Value, ExecutionError> {
    let items = list(&args[0], name)?;
    let mut best: Option<&Value> = None;
    for v in items {
        best = match best {
            None => Some(v),
            Some(b) if compare(v, b)? == keep => Some(v),
            keep_best => keep_best,
        };
    }
    best.cloned()
        .ok_or_else(|| err(name, format!("{name} called on empty list")))
}

fn list_min(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn list_max(args: &[Value]) -> Result<Value, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

/// CEL equality, numbers compared across types.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (
            Value::Int(_) | Value::UInt(_) | Value::Float(_),
            Value::Int(_) | Value::UInt(_) | Value::Float(_),
        ) => compare(a, b).is_ok_and(|o| o == Ordering::Equal),
        _ => a == b,
    }
}

fn list_index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list(&args[0], "indexOf")?;
    let found = items.iter().position(|v| equal(v, &args[1]));
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn list_last_index_of(args: &[Value]) -> Result<Value, ExecutionError> {
    let items = list(&args[0], "lastIndexOf")?;
    let found = items.iter().rposition(|v| equal(v, &args[1]));
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

/// The compiled pattern, from a cache shared by every rule (rules use few patterns, mostly
/// literals; the cache starts over when it grows past a thousand).
fn regex(function: &str, pattern: &str) -> Result<Arc<regex::Regex>, ExecutionError> {
    static CACHE: OnceLock<RwLock<HashMap<String, Arc<regex::Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(re) = cache.read().unwrap_or_else(|e| e.into_inner()).get(pattern) {
        return Ok(re.clone());
    }
    let re = Arc::new(
        regex::Regex::new(pattern).map_err(|e| err(function, super::regex_error(pattern, &e)))?,
    );
    let mut map = cache.write().unwrap_or_else(|e| e.into_inner());
    if map.len() >= 1000 {
        map.clear();
    }
    map.insert(pattern.to_string(), re.clone());
    Ok(re)
}

fn matches(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = string(&args[0], "matches")?;
    let re = regex("matches", string(&args[1], "matches")?)?;
    Ok(Value::Bool(re.is_match(s)))
}

fn find(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = string(&args[0], "find")?;
    let re = regex("find", string(&args[1], "find")?)?;
    Ok(str_value(re.find(s).map_or("", |m| m.as_str())))
}

fn find_all_limited(args: &[Value], limit: Option<i64>) -> Result<Value, ExecutionError> {
    let s = string(&args[0], "findAll")?;
    let re = regex("findAll", string(&args[1], "findAll")?)?;
    let limit = match limit {
        Some(n) if n >= 0 => n as usize,
        _ => usize::MAX,
    };
    let found: Vec<Value> = re
        .find_iter(s)
        .take(limit)
        .map(|m| str_value(m.as_str()))
        .collect();
    Ok(Value::List(Arc::new(found)))
}

fn find_all(args: &[Value]) -> Result<Value, ExecutionError> {
    find_all_limited(args, None)
}

fn find_all_n(args: &[Value]) -> Result<Value, ExecutionError> {
    let n = match &args[2] {
        Value::Int(n) => *n,
        _ => -1,
    };
    if n == 0 {
        return Ok(Value::List(Arc::new(Vec::new())));
    }
    find_all_limited(args, Some(n))
}

fn to_url(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = string(&args[0], "url")?;
    let url = Url::parse(s).map_err(|e| {
        err(
            "url",
            format!("URL parse error during conversion from string: {e}"),
        )
    })?;
    Ok(Value::Opaque(Arc::new(url)))
}

fn is_url(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(Url::parse(string(&args[0], "isURL")?).is_ok()))
}

fn url_arg<'a>(v: &'a Value, function: &str) -> Result<&'a Url, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Url>(),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::no_such_member_overload(function, vec![v.type_of().to_string()]))
}

fn url_scheme(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(str_value(url_arg(&args[0], "getScheme")?.scheme()))
}

fn url_host(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(str_value(url_arg(&args[0], "getHost")?.host()))
}

fn url_hostname(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(str_value(url_arg(&args[0], "getHostname")?.hostname()))
}

fn url_port(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(str_value(url_arg(&args[0], "getPort")?.port()))
}

fn url_escaped_path(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(str_value(
        url_arg(&args[0], "getEscapedPath")?.escaped_path(),
    ))
}

fn url_query(args: &[Value]) -> Result<Value, ExecutionError> {
    let query = url_arg(&args[0], "getQuery")?.query();
    let entries: HashMap<Key, Value> = query
        .into_iter()
        .map(|(k, vs)| {
            let values = vs.into_iter().map(str_value).collect();
            (Key::String(Arc::new(k)), Value::List(Arc::new(values)))
        })
        .collect();
    Ok(Value::Map(Map {
        map: Arc::new(entries),
    }))
}

fn to_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    let q = Quantity::parse(string(&args[0], "quantity")?).map_err(|e| err("quantity", e))?;
    Ok(Value::Opaque(Arc::new(q)))
}

fn is_quantity(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        Quantity::parse(string(&args[0], "isQuantity")?).is_ok(),
    ))
}

fn quantity_arg(v: &Value, function: &str) -> Result<Quantity, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Quantity>().copied(),
        Value::Int(i) => Some(Quantity::from_i64(*i)),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::no_such_member_overload(function, vec![v.type_of().to_string()]))
}

fn q_sign(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(quantity_arg(&args[0], "sign")?.sign()))
}

fn q_is_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        quantity_arg(&args[0], "isInteger")?.as_i64().is_some(),
    ))
}

fn q_as_integer(args: &[Value]) -> Result<Value, ExecutionError> {
    quantity_arg(&args[0], "asInteger")?
        .as_i64()
        .map(Value::Int)
        .ok_or_else(|| err("asInteger", "cannot convert value to integer"))
}

fn q_as_float(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Float(
        quantity_arg(&args[0], "asApproximateFloat")?.as_f64(),
    ))
}

fn q_compare_with(args: &[Value], function: &str) -> Result<Ordering, ExecutionError> {
    let a = quantity_arg(&args[0], function)?;
    let b = quantity_arg(&args[1], function)?;
    Ok(a.compare(&b))
}

fn q_greater(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        q_compare_with(args, "isGreaterThan")? == Ordering::Greater,
    ))
}

fn q_less(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        q_compare_with(args, "isLessThan")? == Ordering::Less,
    ))
}

fn q_compare(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(match q_compare_with(args, "compareTo")? {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }))
}

fn q_add(args: &[Value]) -> Result<Value, ExecutionError> {
    let a = quantity_arg(&args[0], "add")?;
    let b = quantity_arg(&args[1], "add")?;
    let sum = a.add(&b).ok_or_else(|| err("add", "quantity overflow"))?;
    Ok(Value::Opaque(Arc::new(sum)))
}

fn q_sub(args: &[Value]) -> Result<Value, ExecutionError> {
    let a = quantity_arg(&args[0], "sub")?;
    let b = quantity_arg(&args[1], "sub")?;
    let diff = a.sub(&b).ok_or_else(|| err("sub", "quantity overflow"))?;
    Ok(Value::Opaque(Arc::new(diff)))
}

fn two_lists<'a>(
    args: &'a [Value],
    function: &str,
) -> Result<(&'a [Value], &'a [Value]), ExecutionError> {
    Ok((list(&args[0], function)?, list(&args[1], function)?))
}

fn sets_contains(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = two_lists(args, "sets.contains")?;
    Ok(Value::Bool(b.iter().all(|x| a.iter().any(|y| equal(x, y)))))
}

fn sets_equivalent(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = two_lists(args, "sets.equivalent")?;
    let within = |x: &[Value], y: &[Value]| x.iter().all(|v| y.iter().any(|w| equal(v, w)));
    Ok(Value::Bool(within(a, b) && within(b, a)))
}

fn sets_intersects(args: &[Value]) -> Result<Value, ExecutionError> {
    let (a, b) = two_lists(args, "sets.intersects")?;
    Ok(Value::Bool(a.iter().any(|x| b.iter().any(|y| equal(x, y)))))
}

fn ip_arg(v: &Value, function: &str) -> Result<Ip, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Ip>().copied(),
        Value::String(s) => Some(Ip::parse(s).map_err(|e| err(function, e))?),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::no_such_member_overload(function, vec![v.type_of().to_string()]))
}

fn cidr_arg(v: &Value, function: &str) -> Result<Cidr, ExecutionError> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<Cidr>().copied(),
        Value::String(s) => Some(Cidr::parse(s).map_err(|e| err(function, e))?),
        _ => None,
    }
    .ok_or_else(|| ExecutionError::no_such_member_overload(function, vec![v.type_of().to_string()]))
}

fn to_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Opaque(Arc::new(ip_arg(&args[0], "ip")?)))
}

fn is_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(Ip::parse(string(&args[0], "isIP")?).is_ok()))
}

fn ip_is_canonical(args: &[Value]) -> Result<Value, ExecutionError> {
    let s = string(&args[0], "ip.isCanonical")?;
    let ip = Ip::parse(s).map_err(|e| err("ip.isCanonical", e))?;
    Ok(Value::Bool(ip.to_string() == s))
}

fn net_to_string(args: &[Value]) -> Result<Value, ExecutionError> {
    match &args[0] {
        Value::Opaque(o) => {
            if let Some(ip) = o.downcast_ref::<Ip>() {
                return Ok(str_value(ip.to_string()));
            }
            if let Some(cidr) = o.downcast_ref::<Cidr>() {
                return Ok(str_value(cidr.to_string()));
            }
            Err(ExecutionError::no_such_overload(
                "string",
                vec![args[0].type_of().to_string()],
            ))
        }
        other => Err(ExecutionError::no_such_overload(
            "string",
            vec![other.type_of().to_string()],
        )),
    }
}

fn ip_family(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(ip_arg(&args[0], "family")?.family()))
}

fn ip_is_unspecified(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        ip_arg(&args[0], "isUnspecified")?.is_unspecified(),
    ))
}

fn ip_is_loopback(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(ip_arg(&args[0], "isLoopback")?.is_loopback()))
}

fn ip_is_link_local_multicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        ip_arg(&args[0], "isLinkLocalMulticast")?.is_link_local_multicast(),
    ))
}

fn ip_is_link_local_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        ip_arg(&args[0], "isLinkLocalUnicast")?.is_link_local_unicast(),
    ))
}

fn ip_is_global_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        ip_arg(&args[0], "isGlobalUnicast")?.is_global_unicast(),
    ))
}

fn to_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Opaque(Arc::new(cidr_arg(&args[0], "cidr")?)))
}

fn is_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        Cidr::parse(string(&args[0], "isCIDR")?).is_ok(),
    ))
}

fn cidr_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Opaque(Arc::new(cidr_arg(&args[0], "ip")?.ip())))
}

fn cidr_masked(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Opaque(Arc::new(
        cidr_arg(&args[0], "masked")?.masked(),
    )))
}

fn cidr_prefix_length(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(cidr_arg(&args[0], "prefixLength")?.bits as i64))
}

fn cidr_contains_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let net = cidr_arg(&args[0], "containsIP")?;
    let ip = ip_arg(&args[1], "containsIP")?;
    Ok(Value::Bool(net.contains_ip(&ip)))
}

fn cidr_contains_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let net = cidr_arg(&args[0], "containsCIDR")?;
    let other = cidr_arg(&args[1], "containsCIDR")?;
    Ok(Value::Bool(net.contains_cidr(&other)))
}

/// The shapes equality calls compare along (few: one per distinct shape of any schema).
fn shapes() -> &'static RwLock<Vec<Arc<EqShape>>> {
    static SHAPES: OnceLock<RwLock<Vec<Arc<EqShape>>>> = OnceLock::new();
    SHAPES.get_or_init(Default::default)
}

/// The index of `shape` among the registered shapes, registering it if new.
pub(crate) fn register_shape(shape: EqShape) -> i64 {
    let mut all = shapes().write().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = all.iter().position(|s| **s == shape) {
        return i as i64;
    }
    all.push(Arc::new(shape));
    (all.len() - 1) as i64
}

fn shaped_equals(args: &[Value]) -> Result<Value, ExecutionError> {
    let shape = match &args[2] {
        Value::Int(i) => shapes()
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(*i as usize)
            .cloned(),
        _ => None,
    };
    let equal = match shape {
        Some(shape) => shaped_equal(&args[0], &args[1], &shape),
        None => deep_equal(&args[0], &args[1]),
    };
    Ok(Value::Bool(equal))
}

/// CEL equality: numbers across types, lists element by element, maps key by key.
fn deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| deep_equal(p, q))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map
                    .iter()
                    .all(|(k, v)| y.map.get(k).is_some_and(|w| deep_equal(v, w)))
        }
        _ => equal(a, b),
    }
}

/// Equality as Kubernetes compares values with set and map lists inside: sets regardless of
/// order, map lists item by item by their keys.
fn shaped_equal(a: &Value, b: &Value, shape: &EqShape) -> bool {
    match (shape, a, b) {
        (EqShape::List(assoc, elem), Value::List(x), Value::List(y)) => {
            if x.len() != y.len() {
                return false;
            }
            match assoc {
                Assoc::None => x
                    .iter()
                    .zip(y.iter())
                    .all(|(p, q)| shaped_equal(p, q, elem)),
                Assoc::Set => {
                    let within = |p: &[Value], q: &[Value]| {
                        p.iter().all(|v| q.iter().any(|w| shaped_equal(v, w, elem)))
                    };
                    within(x, y) && within(y, x)
                }
                Assoc::Map(keys) => {
                    let key_of = |v: &Value| -> String {
                        keys.iter()
                            .map(|k| match v {
                                Value::Map(m) => {
                                    format!("{:?}", m.map.get(&Key::String(Arc::new(k.clone()))))
                                }
                                _ => String::new(),
                            })
                            .collect::<Vec<_>>()
                            .join("\u{0}")
                    };
                    let by_key: HashMap<String, &Value> =
                        y.iter().map(|v| (key_of(v), v)).collect();
                    by_key.len() == y.len()
                        && x.iter().all(|v| {
                            by_key
                                .get(&key_of(v))
                                .is_some_and(|w| shaped_equal(v, w, elem))
                        })
                }
            }
        }
        (EqShape::Values(values), Value::Map(x), Value::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map
                    .iter()
                    .all(|(k, v)| y.map.get(k).is_some_and(|w| shaped_equal(v, w, values)))
        }
        (EqShape::Fields(fields), Value::Map(x), Value::Map(y)) => {
            x.map.len() == y.map.len()
                && x.map.iter().all(|(k, v)| {
                    y.map.get(k).is_some_and(|w| {
                        let field = match k {
                            Key::String(name) => fields.get(name.as_str()),
                            _ => None,
                        };
                        match field {
                            Some(shape) => shaped_equal(v, w, shape),
                            None => deep_equal(v, w),
                        }
                    })
                })
        }
        _ => deep_equal(a, b),
    }
}
