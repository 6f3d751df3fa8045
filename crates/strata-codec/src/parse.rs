//! A JSON parser that builds `serde_json` values directly: the fast path of the JSON decoders.
//!
//! Decoding through serde's visitor interface gave a ServiceAccount's JSON in 13 µs; most of
//! that went to growing each object's map member by member (an `IndexMap` reallocates its
//! entries and rehashes its table as it grows), to growing arrays the same way, and, in the
//! strict decoder, to formatting the path of every member in case it turned out to be a
//! duplicate. This parser gathers an object's members (and an array's items) on a stack shared
//! by the whole document and builds each map once, at its final size, when its closing brace is
//! read; strings are copied once, at their exact length.
//!
//! It only ever answers for documents it is sure of. Anything else (a syntax error of any kind,
//! a lone surrogate escape, nesting deeper than [`MAX_DEPTH`], a number serde_json refuses,
//! and, when asked, a member repeated in its object) makes it give up with `None`, and the
//! caller decodes the document again with serde_json, whose value and error are the
//! reference. So the value returned is always the one serde_json would give (the last of two
//! members with one name wins, in the first one's place), and every error is serde_json's own.

use std::cell::RefCell;

use serde_json::{Map, Value};

/// The deepest nesting of arrays and objects this parser follows. serde_json refuses a
/// document nested 128 deep; anything deeper than this goes to it, which decides.
const MAX_DEPTH: usize = 100;

/// Parses a whole JSON document (whitespace around the value allowed), or gives up with `None`
/// (see the module's documentation). With `refuse_duplicates`, an object that names a member
/// twice also gives up, so that the strict decoder can report it by path.
pub(crate) fn parse(bytes: &[u8], refuse_duplicates: bool) -> Option<Value> {
    // JSON outside strings is ASCII and serde_json checks strings are UTF-8, so a document that
    // is not UTF-8 is an error in any case. Checking it once here lets every string be sliced
    // from the text without checking its bytes again.
    let text = std::str::from_utf8(bytes).ok()?;
    let mut parser = Parser {
        text,
        bytes,
        pos: 0,
        depth: 0,
        stacks: STACKS.with(RefCell::take),
        refuse_duplicates,
    };
    parser.skip_whitespace();
    let value = parser.value().and_then(|value| {
        parser.skip_whitespace();
        (parser.pos == bytes.len()).then_some(value)
    });
    let mut stacks = parser.stacks;
    stacks.clear();
    STACKS.with(|s| *s.borrow_mut() = stacks);
    value
}

/// The most members and items (and bytes of unescaped string) the stacks keep between
/// documents: enough for any one object, without holding on to the size of a long list.
const KEEP: usize = 256;

thread_local! {
    /// Each thread's stacks, kept from one document to the next: allocating them for each
    /// document cost more than the rest of a small one's allocations (blocks of a kilobyte or
    /// more make glibc's allocator consolidate its free lists).
    static STACKS: RefCell<Stacks> = RefCell::default();
}

#[derive(Default)]
struct Stacks {
    /// The members of the objects being read, innermost last: an object's members are those
    /// above the stack's length when it opened.
    members: Vec<(String, Value)>,
    /// The items of the arrays being read, likewise.
    items: Vec<Value>,
    /// Where strings with escapes are unescaped.
    scratch: String,
}

impl Stacks {
    /// Empties the stacks (a document given up on leaves values in them) and gives back what
    /// is over [`KEEP`].
    fn clear(&mut self) {
        self.members.clear();
        self.items.clear();
        self.scratch.clear();
        self.members.shrink_to(KEEP);
        self.items.shrink_to(KEEP);
        self.scratch.shrink_to(KEEP);
    }
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    stacks: Stacks,
    refuse_duplicates: bool,
}

impl Parser<'_> {
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// The value starting at `pos` (not whitespace).
    fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string().map(Value::String),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Some(value)
        } else {
            None
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        self.pos += 1;
        self.skip_whitespace();
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn object(&mut self) -> Option<Value> {
        self.enter()?;
        let start = self.stacks.members.len();
        if self.peek()? == b'}' {
            self.pos += 1;
            self.depth -= 1;
            return Some(Value::Object(Map::new()));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string()?;
            self.skip_whitespace();
            if self.peek()? != b':' {
                return None;
            }
            self.pos += 1;
            self.skip_whitespace();
            let value = self.value()?;
            self.stacks.members.push((key, value));
            self.skip_whitespace();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.skip_whitespace();
                }
                b'}' => {
                    self.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
        self.depth -= 1;
        // Inserted in document order, as serde_json inserts them: a repeated name keeps its
        // first place and takes its last value.
        let mut map = Map::with_capacity(self.stacks.members.len() - start);
        for (key, value) in self.stacks.members.drain(start..) {
            if map.insert(key, value).is_some() && self.refuse_duplicates {
                return None;
            }
        }
        Some(Value::Object(map))
    }

    fn array(&mut self) -> Option<Value> {
        self.enter()?;
        let start = self.stacks.items.len();
        if self.peek()? == b']' {
            self.pos += 1;
            self.depth -= 1;
            return Some(Value::Array(Vec::new()));
        }
        loop {
            let item = self.value()?;
            self.stacks.items.push(item);
            self.skip_whitespace();
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    self.skip_whitespace();
                }
                b']' => {
                    self.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
        self.depth -= 1;
        Some(Value::Array(self.stacks.items.drain(start..).collect()))
    }

    /// The string whose opening quote is at `pos`.
    fn string(&mut self) -> Option<String> {
        let start = self.pos + 1;
        let end = self.plain_run(start);
        match *self.bytes.get(end)? {
            b'"' => {
                self.pos = end + 1;
                // Both ends are ASCII quotes, so the slice is whole characters.
                Some(self.text[start..end].to_owned())
            }
            b'\\' => self.escaped(start, end),
            // A control character: serde_json refuses it.
            _ => None,
        }
    }

    /// The rest of a string from `start`, with its first escape at `at`.
    fn escaped(&mut self, start: usize, mut at: usize) -> Option<String> {
        let mut out = std::mem::take(&mut self.stacks.scratch);
        out.clear();
        out.push_str(&self.text[start..at]);
        loop {
            // `at` is a backslash.
            let escape = *self.bytes.get(at + 1)?;
            at += 2;
            match escape {
                b'"' => out.push('"'),
                b'\\' => out.push('\\'),
                b'/' => out.push('/'),
                b'b' => out.push('\u{8}'),
                b'f' => out.push('\u{c}'),
                b'n' => out.push('\n'),
                b'r' => out.push('\r'),
                b't' => out.push('\t'),
                b'u' => {
                    let (c, len) = self.unicode_escape(at)?;
                    out.push(c);
                    at += len;
                }
                _ => return None,
            }
            let end = self.plain_run(at);
            out.push_str(&self.text[at..end]);
            match *self.bytes.get(end)? {
                b'"' => {
                    self.pos = end + 1;
                    let s = out.as_str().to_owned();
                    self.stacks.scratch = out;
                    return Some(s);
                }
                b'\\' => at = end,
                _ => return None,
            }
        }
    }

    /// The character of the `\u` escape whose hex digits start at `at`, and how many bytes it
    /// took from there (a surrogate pair is two escapes). A lone surrogate gives up: serde_json
    /// refuses it.
    fn unicode_escape(&self, at: usize) -> Option<(char, usize)> {
        let first = self.hex4(at)?;
        match first {
            0xD800..=0xDBFF => {
                if self.bytes.get(at + 4..at + 6)? != b"\\u" {
                    return None;
                }
                let second = self.hex4(at + 6)?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return None;
                }
                let c = 0x1_0000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                Some((char::from_u32(c)?, 10))
            }
            0xDC00..=0xDFFF => None,
            _ => Some((char::from_u32(first)?, 4)),
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        self.bytes.get(at..at + 4)?.iter().try_fold(0, |n, &b| {
            let digit = char::from(b).to_digit(16)?;
            Some(n * 16 + digit)
        })
    }

    /// The end of the run of string bytes from `from` that need no attention: the first quote,
    /// backslash or control character, or the end of the input. Eight bytes at a time while
    /// none of them is one of those.
    fn plain_run(&self, from: usize) -> usize {
        const ONES: u64 = 0x0101_0101_0101_0101;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        // A byte of `x - ONES * n` has its high bit set, where that byte of `x` does not, for
        // some byte of `x` below `n` (exact as to whether there is one, for `n` up to 128).
        let any_below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH != 0;
        let mut i = from;
        while let Some(chunk) = self.bytes.get(i..i + 8) {
            let x = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            if any_below(x, 0x20)
                || any_below(x ^ (ONES * u64::from(b'"')), 1)
                || any_below(x ^ (ONES * u64::from(b'\\')), 1)
            {
                break;
            }
            i += 8;
        }
        while let Some(&b) = self.bytes.get(i) {
            if b == b'"' || b == b'\\' || b < 0x20 {
                break;
            }
            i += 1;
        }
        i
    }

    /// The number at `pos`. Integers of up to 18 digits (which fit both `u64` and `i64`) are
    /// read here; any other number (fractions, exponents, longer integers, `-0`) is handed to
    /// serde_json, so that it is exactly the number serde_json reads.
    fn number(&mut self) -> Option<Value> {
        let bytes = self.bytes;
        let start = self.pos;
        let mut i = start;
        let negative = bytes[i] == b'-';
        if negative {
            i += 1;
        }
        let digits = |mut i: usize| {
            while let Some(b'0'..=b'9') = bytes.get(i) {
                i += 1;
            }
            i
        };
        let int_start = i;
        i = match bytes.get(i)? {
            // One leading zero and no more digits; "01" is an error (found where the number's
            // container looks for what follows it).
            b'0' => i + 1,
            b'1'..=b'9' => digits(i + 1),
            _ => return None,
        };
        let int_end = i;
        let mut integer = true;
        if bytes.get(i) == Some(&b'.') {
            let end = digits(i + 1);
            if end == i + 1 {
                return None;
            }
            i = end;
            integer = false;
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            let end = digits(i);
            if end == i {
                return None;
            }
            i = end;
            integer = false;
        }
        self.pos = i;
        if integer && int_end - int_start <= 18 {
            let n = bytes[int_start..int_end]
                .iter()
                .fold(0u64, |n, &b| n * 10 + u64::from(b - b'0'));
            if !negative {
                return Some(Value::Number(n.into()));
            }
            if n != 0 {
                let n = i64::try_from(n).ok()?;
                return Some(Value::Number((-n).into()));
            }
        }
        match serde_json::from_slice(&bytes[start..i]).ok()? {
            number @ Value::Number(_) => Some(number),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strict;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn fixture() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/HEAD/v1.ServiceAccount.json"
        );
        std::fs::read(path).expect("read the ServiceAccount fixture")
    }

    /// The public decoders give what serde_json (plain) and the tree (strict) give for `doc`:
    /// the same value with its members in the same order, the same duplicates, the same error.
    fn check(doc: &[u8]) {
        let reference = serde_json::from_slice::<Value>(doc);
        let ours = crate::json::from_slice(doc);
        match (&reference, &ours) {
            (Ok(want), Ok(got)) => {
                assert_eq!(got, want);
                assert_eq!(crate::json::compact(got), crate::json::compact(want));
            }
            (Err(want), Err(got)) => assert_eq!(got.to_string(), want.to_string()),
            _ => panic!(
                "{:?}: serde_json {reference:?}, ours {ours:?}",
                doc_text(doc)
            ),
        }
        assert_eq!(
            crate::json::decode(doc),
            reference
                .as_ref()
                .map_err(crate::json::decode_error)
                .cloned()
        );
        let want = strict::json_tree(doc);
        let got = strict::json(doc);
        assert_eq!(got, want, "strict, {:?}", doc_text(doc));
        if let (Ok(got), Ok(want)) = (&got, &want) {
            assert_eq!(
                crate::json::compact(&got.value),
                crate::json::compact(&want.value)
            );
        }
        // Whatever the fast parser answers, serde_json answers the same.
        for refuse in [false, true] {
            if let Some(v) = parse(doc, refuse) {
                let want = reference.as_ref().expect("serde_json accepts it too");
                assert_eq!(crate::json::compact(&v), crate::json::compact(want));
            }
        }
    }

    fn doc_text(doc: &[u8]) -> String {
        String::from_utf8_lossy(doc).into_owned()
    }

    #[test]
    fn the_fixture_takes_the_fast_path_and_decodes_as_serde_json_does() {
        let doc = fixture();
        let fast = parse(&doc, true).expect("the fast path answers");
        let want: Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(crate::json::compact(&fast), crate::json::compact(&want));
        check(&doc);
    }

    #[test]
    fn edge_cases_agree_with_serde_json() {
        let cases: &[&str] = &[
            "",
            " ",
            "{",
            "}",
            "[",
            "]",
            "{}",
            "[]",
            " {} ",
            "\t\r\n[ ]\n",
            "{} x",
            "{}{}",
            "[1,]",
            "{\"a\":1,}",
            "{,}",
            "[,1]",
            "{\"a\" 1}",
            "{\"a\":}",
            "{1:2}",
            "{'a':1}",
            "nul",
            "null",
            "nullx",
            "true",
            "tru",
            "false",
            "falsey",
            "0",
            "-0",
            "01",
            "-01",
            "1.",
            ".5",
            "1.5",
            "-1.5e3",
            "1e",
            "1e+",
            "1E-2",
            "2e400",
            "-2e400",
            "1e-400",
            "123456789012345678",
            "1234567890123456789",
            "12345678901234567890",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775807",
            "-9223372036854775808",
            "-9223372036854775809",
            "-",
            "--1",
            "+1",
            "0x10",
            "1_000",
            "NaN",
            "Infinity",
            "\"\"",
            "\"a",
            "\"a\\\"",
            "\"\\u00e9\"",
            "\"\\u00E9\\u20AC\"",
            "\"\\ud83d\\ude00\"",
            "\"\\ud83d\"",
            "\"\\ud83dx\"",
            "\"\\ud83d\\u0041\"",
            "\"\\ude00\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "\"\\x\"",
            "\"\\/\\b\\f\\n\\r\\t\\\\\"",
            "\"tab\there\"",
            "\"nl\nx\"",
            "\"\u{7f}\u{80}ü✓😀\"",
            "\"0123456789abcdef\\n0123456789abcdef\"",
            "{\"a\":1,\"a\":2}",
            "{\"a\":{\"x\":1,\"x\":2},\"a\":[{\"y\":1,\"y\":2}]}",
            "[{\"\":{\"a\":1,\"a\":2}}]",
            "{\"a\\u0062\":1,\"ab\":2}",
            "{\"b\":1,\"a\":2,\"b\":3}",
            "\u{feff}{}",
            "[true,false,null,1,-1,\"s\",{},[]]",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
        ];
        for case in cases {
            check(case.as_bytes());
        }
        check(b"\"\xff\"");
        check(b"\"\xc3\"");
        check(b"{\"a\":\"\xe2\x9c\"}");
        // Nesting: serde_json refuses 128 levels; the fast parser hands anything over 100 to
        // it.
        for depth in [99, 100, 101, 127, 128, 200] {
            for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
                let doc = format!("{}1{}", open.repeat(depth), close.repeat(depth));
                check(doc.as_bytes());
            }
        }
    }

    #[test]
    fn the_stacks_are_emptied_and_kept_small_between_documents() {
        // Given up on halfway through, with members and items on the stacks.
        assert_eq!(parse(br#"{"a":[1,{"b":2,"b":3}]}"#, true), None);
        let long = format!("[{}1]", "{\"k\":\"v\"},".repeat(5_000));
        let v = parse(long.as_bytes(), true).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 5_001);
        STACKS.with(|s| {
            let s = s.borrow();
            assert!(s.members.is_empty() && s.items.is_empty() && s.scratch.is_empty());
            assert!(s.items.capacity() <= KEEP && s.members.capacity() <= KEEP);
        });
        assert_eq!(
            parse(br#"{"a":[1,{"b":2}]}"#, true),
            Some(serde_json::json!({"a": [1, {"b": 2}]}))
        );
    }

    /// A random document, written with random spacing, escapes and repeated names.
    fn random_doc(rng: &mut StdRng, depth: usize, out: &mut String) {
        let space = |rng: &mut StdRng, out: &mut String| {
            for _ in 0..rng.random_range(0..3usize).saturating_sub(1) {
                out.push([' ', '\n', '\t', '\r'][rng.random_range(0..4)]);
            }
        };
        space(rng, out);
        match rng.random_range(0..if depth > 4 { 6 } else { 8 }) {
            0 => out.push_str(["null", "true", "false"][rng.random_range(0..3)]),
            1 => {
                let numbers = [
                    "0",
                    "-0",
                    "7",
                    "-12",
                    "3.25",
                    "-0.5e-3",
                    "1E10",
                    "9007199254740993",
                    "-9223372036854775808",
                    "18446744073709551615",
                    "18446744073709551616",
                    "123456789012345678",
                    "1234567890123456789",
                    "0.1",
                    "5e-324",
                ];
                out.push_str(numbers[rng.random_range(0..numbers.len())]);
            }
            2..=5 => random_string(rng, out),
            6 => {
                out.push('[');
                for i in 0..rng.random_range(0..5) {
                    if i > 0 {
                        out.push(',');
                    }
                    random_doc(rng, depth + 1, out);
                }
                space(rng, out);
                out.push(']');
            }
            _ => {
                out.push('{');
                for i in 0..rng.random_range(0..6) {
                    if i > 0 {
                        out.push(',');
                    }
                    space(rng, out);
                    random_string(rng, out);
                    space(rng, out);
                    out.push(':');
                    random_doc(rng, depth + 1, out);
                }
                space(rng, out);
                out.push('}');
            }
        }
        space(rng, out);
    }

    /// A short string from a small alphabet (so that names repeat), with escapes.
    fn random_string(rng: &mut StdRng, out: &mut String) {
        let pieces = [
            "a",
            "b",
            "name",
            "f:x",
            "é",
            "✓",
            "😀",
            "\\n",
            "\\\"",
            "\\\\",
            "\\/",
            "\\u0061",
            "\\u00e9",
            "\\ud83d\\ude00",
            "k:{\\\"uid\\\":1}",
            "0123456789",
            " ",
        ];
        out.push('"');
        for _ in 0..rng.random_range(0..4) {
            out.push_str(pieces[rng.random_range(0..pieces.len())]);
        }
        out.push('"');
    }

    /// `doc` with one random change: cut short, a byte changed, inserted or removed.
    fn mutate(rng: &mut StdRng, doc: &[u8]) -> Vec<u8> {
        let mut doc = doc.to_vec();
        let at = rng.random_range(0..=doc.len());
        let bytes = b"{}[]\":,\\ -01e.nux\x00\x1f\xc3\xff";
        let byte = bytes[rng.random_range(0..bytes.len())];
        match rng.random_range(0..4) {
            0 => doc.truncate(at),
            1 if at < doc.len() => doc[at] = byte,
            2 => doc.insert(at, byte),
            _ if at < doc.len() => {
                doc.remove(at);
            }
            _ => {}
        }
        doc
    }

    #[test]
    fn random_documents_and_their_mutations_agree_with_serde_json() {
        let mut rng = StdRng::seed_from_u64(0x5eed_f00d);
        let fixture = fixture();
        let mut fast = 0;
        for round in 0..20_000 {
            let doc = if round % 4 == 0 {
                fixture.clone()
            } else {
                let mut text = String::new();
                random_doc(&mut rng, 0, &mut text);
                text.into_bytes()
            };
            if parse(&doc, true).is_some() {
                fast += 1;
            }
            check(&doc);
            check(&mutate(&mut rng, &doc));
        }
        // Most well-formed documents without repeats take the fast path.
        assert!(fast > 10_000, "{fast} documents took the fast path");
    }
}
