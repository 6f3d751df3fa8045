//! Kubernetes resource quantities (`100m`, `1.5Gi`, `2e3`) for the CEL `quantity` library:
//! parsing with `resource.ParseQuantity`'s grammar and error texts, exact comparison and
//! arithmetic.

use std::cmp::Ordering;

/// A quantity's value: `mantissa × 10^scale`, exactly (binary suffixes are multiplied out).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quantity {
    mantissa: i128,
    scale: i32,
}

pub(crate) const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const NUMERIC_ERROR: &str = "unable to parse numeric part of quantity";
const SUFFIX_ERROR: &str = "unable to parse quantity's suffix";

impl Quantity {
    fn new(mantissa: i128, scale: i32) -> Quantity {
        let mut q = Quantity { mantissa, scale };
        q.normalize();
        q
    }

    fn normalize(&mut self) {
        if self.mantissa == 0 {
            self.scale = 0;
            return;
        }
        while self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.scale += 1;
        }
    }

    pub fn from_i64(v: i64) -> Quantity {
        Quantity::new(v as i128, 0)
    }

    /// Parses a quantity as Kubernetes' `resource.ParseQuantity` does.
    pub fn parse(s: &str) -> Result<Quantity, &'static str> {
        if s.is_empty() {
            return Err(FORMAT_ERROR);
        }
        let bytes = s.as_bytes();
        let mut pos = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            pos = 1;
        }
        let num_start = pos;
        let mut int_digits = String::new();
        let mut frac_digits = String::new();
        let mut seen_dot = false;
        while pos < bytes.len() {
            match bytes[pos] {
                b'0'..=b'9' => {
                    if seen_dot {
                        frac_digits.push(bytes[pos] as char)
                    } else {
                        int_digits.push(bytes[pos] as char)
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                b'.' => return Err(FORMAT_ERROR),
                _ => break,
            }
            pos += 1;
        }
        if pos == num_start || (int_digits.is_empty() && frac_digits.is_empty()) {
            return Err(FORMAT_ERROR);
        }
        let suffix = &s[pos..];
        if !suffix
            .bytes()
            .all(|c| b"eEinumkKMGTP+-0123456789".contains(&c))
        {
            return Err(FORMAT_ERROR);
        }
        // The mantissa: the digits, without leading zeros, limited to what i128 holds.
        let digits = format!("{int_digits}{frac_digits}");
        let digits = digits.trim_start_matches('0');
        let mut scale = -(frac_digits.len() as i32);
        let mut mantissa: i128 = 0;
        let mut dropped = 0i32;
        for c in digits.bytes() {
            match mantissa.checked_mul(10) {
                Some(m) if m < i128::MAX / 1_000_000_000_000 => mantissa = m + (c - b'0') as i128,
                _ => dropped += 1,
            }
        }
        scale += dropped;
        let (base2, exp10) = parse_suffix(suffix)?;
        scale = scale.checked_add(exp10).ok_or(NUMERIC_ERROR)?;
        for _ in 0..base2 / 10 {
            mantissa = mantissa.checked_mul(1024).ok_or(NUMERIC_ERROR)?;
        }
        if negative {
            mantissa = -mantissa;
        }
        Ok(Quantity::new(mantissa, scale))
    }

    pub fn sign(&self) -> i64 {
        self.mantissa.signum() as i64
    }

    /// The integer value, when the quantity is a whole number within `int64`.
    pub fn as_i64(&self) -> Option<i64> {
        if self.scale < 0 {
            return None;
        }
        let mut m = self.mantissa;
        for _ in 0..self.scale {
            m = m.checked_mul(10)?;
        }
        i64::try_from(m).ok()
    }

    pub fn as_f64(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.scale)
    }

    /// Both mantissas at the smaller scale, when they fit.
    fn aligned(&self, o: &Quantity) -> Option<(i128, i128, i32)> {
        let scale = self.scale.min(o.scale);
        let up = |q: &Quantity| -> Option<i128> {
            let mut m = q.mantissa;
            for _ in 0..(q.scale - scale) {
                m = m.checked_mul(10)?;
            }
            Some(m)
        };
        Some((up(self)?, up(o)?, scale))
    }

    pub fn add(&self, o: &Quantity) -> Option<Quantity> {
        let (a, b, s) = self.aligned(o)?;
        Some(Quantity::new(a.checked_add(b)?, s))
    }

    pub fn sub(&self, o: &Quantity) -> Option<Quantity> {
        let (a, b, s) = self.aligned(o)?;
        Some(Quantity::new(a.checked_sub(b)?, s))
    }

    pub fn compare(&self, o: &Quantity) -> Ordering {
        if let Some((a, b, _)) = self.aligned(o) {
            return a.cmp(&b);
        }
        // Too far apart to align: the signs, then the magnitudes, decide.
        let (sa, sb) = (self.mantissa.signum(), o.mantissa.signum());
        if sa != sb {
            return sa.cmp(&sb);
        }
        let magnitude =
            |q: &Quantity| q.mantissa.unsigned_abs().to_string().len() as i64 + q.scale as i64;
        let by_magnitude = magnitude(self).cmp(&magnitude(o));
        if sa < 0 {
            by_magnitude.reverse()
        } else {
            by_magnitude
        }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, o: &Quantity) -> bool {
        self.compare(o) == Ordering::Equal
    }
}

impl Eq for Quantity {}

/// A suffix as (power of two, power of ten).
fn parse_suffix(s: &str) -> Result<(i32, i32), &'static str> {
    Ok(match s {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        _ => {
            let rest = s
                .strip_prefix('e')
                .or_else(|| s.strip_prefix('E'))
                .ok_or(SUFFIX_ERROR)?;
            let exp: i32 = rest.parse().map_err(|_| SUFFIX_ERROR)?;
            if !(-1000..=1000).contains(&exp) {
                return Err(NUMERIC_ERROR);
            }
            (0, exp)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn parses_every_suffix_kind() {
        assert_eq!(q("1Ki").as_i64(), Some(1024));
        assert_eq!(q("1.5Gi").as_i64(), Some(1_610_612_736));
        assert_eq!(q("100m").as_f64(), 0.1);
        assert_eq!(q("2e3").as_i64(), Some(2000));
        assert_eq!(q("-1k").as_i64(), Some(-1000));
        assert_eq!(q(".5").as_f64(), 0.5);
        assert_eq!(q("100m").as_i64(), None);
        assert_eq!(Quantity::parse("").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("1.2.3").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("abc").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("1Qi").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("1KiB").unwrap_err(), FORMAT_ERROR);
        assert_eq!(Quantity::parse("1mm").unwrap_err(), SUFFIX_ERROR);
    }

    #[test]
    fn compares_and_adds_exactly() {
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki").compare(&q("1k")), Ordering::Greater);
        assert_eq!(q("-1").compare(&q("1n")), Ordering::Less);
        assert_eq!(q("1").add(&q("500m")).unwrap(), q("1.5"));
        assert_eq!(q("1").sub(&q("2")).unwrap().sign(), -1);
        assert_eq!(q("1e100").compare(&q("1n")), Ordering::Greater);
    }
}
