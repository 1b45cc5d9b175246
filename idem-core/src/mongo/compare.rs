//! Comparing and showing stored values as a MongoDB filter would see them.

use mongodb::bson::Bson;

use crate::audit::{KeyValue, ShownValue};
use crate::engine::StoredScalar;

impl StoredScalar for Bson {
    fn is_null(&self) -> bool {
        matches!(self, Bson::Null)
    }

    fn text(&self) -> Option<&str> {
        self.as_str()
    }
}

/// A natural key's value as the unique index compares it (as a filter does, [`bson_equal`])
/// and a report shows it (relaxed extended JSON).
impl KeyValue for Bson {
    fn same(&self, other: &Self) -> bool {
        bson_equal(self, other)
    }

    fn shown(&self) -> ShownValue {
        ShownValue::from_json(self.clone().into_relaxed_extjson())
    }
}

/// A value as error messages show it: relaxed extended JSON.
pub(crate) fn show(value: &Bson) -> String {
    value.clone().into_relaxed_extjson().to_string()
}

/// Numbers compare by value across int32, int64 and double, so a document written by another
/// tool with narrower integers is not a change. A server's reply and an index's key pattern
/// are read the same way.
pub(crate) fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(n) => Some(f64::from(*n)),
        Bson::Int64(n) => Some(*n as f64),
        Bson::Double(n) => Some(*n),
        _ => None,
    }
}

/// A whole number of a server's reply (a count, a statement's index) as a `usize`: an int32 or
/// an int64 that fits.
pub(crate) fn whole(value: &Bson) -> Option<usize> {
    match value {
        Bson::Int32(n) => usize::try_from(*n).ok(),
        Bson::Int64(n) => usize::try_from(*n).ok(),
        _ => None,
    }
}

/// Equality as a MongoDB filter (and a unique index) sees it: numbers by their exact value
/// whatever their type (`1`, `NumberLong(1)`, `1.0` and `NumberDecimal("1.00")` are one key;
/// `NumberLong(2^53 + 1)` is not the double nearest it), a symbol as its string, documents
/// field by field in order, arrays item by item.
pub(crate) fn bson_equal(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((kx, vx), (ky, vy))| kx == ky && bson_equal(vx, vy))
        }
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(vx, vy)| bson_equal(vx, vy))
        }
        (Bson::Symbol(x) | Bson::String(x), Bson::Symbol(y) | Bson::String(y)) => x == y,
        (Bson::Decimal128(_), _) | (_, Bson::Decimal128(_)) => match (exact(a), exact(b)) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
        _ => match (integer(a), integer(b), number(a), number(b)) {
            (Some(x), Some(y), _, _) => x == y,
            (Some(x), None, _, Some(y)) | (None, Some(x), Some(y), _) => double_is(y, x),
            // A filter's `$eq` matches NaN with NaN, so a stored NaN is not a change.
            (_, _, Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => a == b,
        },
    }
}

/// An int32 or int64.
fn integer(value: &Bson) -> Option<i64> {
    match value {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        _ => None,
    }
}

/// Whether the double `d` is exactly the integer `n`.
fn double_is(d: f64, n: i64) -> bool {
    // 2^63, exactly: `i64::MAX as f64` rounds up to it.
    const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;
    d.fract() == 0.0 && (-TWO_TO_63..TWO_TO_63).contains(&d) && d as i64 == n
}

/// A number's exact value: its significant digits (no leading or trailing zero), its sign and
/// the power of ten of its last digit; zero, NaN and the infinities apart.
#[derive(Debug, PartialEq)]
enum Exact {
    Finite {
        negative: bool,
        digits: Vec<u8>,
        exponent: i64,
    },
    Zero,
    NaN,
    Infinity {
        negative: bool,
    },
}

/// The exact value of a number of any BSON type; `None` for anything else.
fn exact(value: &Bson) -> Option<Exact> {
    match value {
        Bson::Decimal128(decimal) => decimal_exact(&decimal.to_string()),
        Bson::Double(d) if d.is_nan() => Some(Exact::NaN),
        Bson::Double(d) if d.is_infinite() => Some(Exact::Infinity { negative: *d < 0.0 }),
        Bson::Double(d) => Some(double_exact(*d)),
        _ => integer(value).map(|n| finite(n < 0, n.unsigned_abs().to_string().into_bytes(), 0)),
    }
}

/// The exact value of `negative` `digits` (ASCII) times ten to `exponent`, normalized.
fn finite(negative: bool, digits: Vec<u8>, mut exponent: i64) -> Exact {
    let mut digits: Vec<u8> = digits.into_iter().skip_while(|&d| d == b'0').collect();
    while digits.last() == Some(&b'0') {
        digits.pop();
        exponent += 1;
    }
    match digits.is_empty() {
        true => Exact::Zero,
        false => Exact::Finite {
            negative,
            digits,
            exponent,
        },
    }
}

/// The exact value of a finite double: its significand times a power of two, written out in
/// decimal (a double's value always has a finite decimal expansion).
fn double_exact(d: f64) -> Exact {
    let bits = d.to_bits();
    let biased = i64::try_from((bits >> 52) & 0x7ff).unwrap_or(0);
    let fraction = bits & ((1 << 52) - 1);
    let (mut significand, mut power) = match biased {
        0 => (fraction, -1074),
        _ => (fraction | (1 << 52), biased - 1075),
    };
    if significand == 0 {
        return Exact::Zero;
    }
    while significand % 2 == 0 {
        significand /= 2;
        power += 1;
    }
    let mut digits = significand.to_string().into_bytes();
    // m·2^p is m·2^p·10^0 for p >= 0, and m·5^-p·10^p below.
    let (factor, times, exponent) = match power {
        p if p >= 0 => (2, p, 0),
        p => (5, -p, p),
    };
    for _ in 0..times {
        multiply(&mut digits, factor);
    }
    finite(d < 0.0, digits, exponent)
}

/// `digits` (decimal ASCII, most significant first) times a small `factor`, in place.
fn multiply(digits: &mut Vec<u8>, factor: u32) {
    let mut carry = 0;
    for digit in digits.iter_mut().rev() {
        let product = u32::from(*digit - b'0') * factor + carry;
        *digit = b'0' + (product % 10) as u8;
        carry = product / 10;
    }
    while carry > 0 {
        digits.insert(0, b'0' + (carry % 10) as u8);
        carry /= 10;
    }
}

/// The exact value of a Decimal128 as its text writes it (`-1.50E+3`, `NaN`, `-Infinity`).
fn decimal_exact(text: &str) -> Option<Exact> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    match unsigned {
        "NaN" => return Some(Exact::NaN),
        "Infinity" | "Inf" => return Some(Exact::Infinity { negative }),
        _ => {}
    }
    let (mantissa, exponent) = match unsigned.split_once(['E', 'e']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().ok()?),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).collect();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let exponent = exponent - i64::try_from(fraction.len()).ok()?;
    Some(finite(negative, digits, exponent))
}

#[cfg(test)]
mod tests {
    use super::bson_equal;
    use mongodb::bson::{Bson, Decimal128};

    fn decimal(text: &str) -> Bson {
        Bson::Decimal128(text.parse::<Decimal128>().unwrap())
    }

    #[test]
    fn numbers_are_one_key_by_their_exact_value_whatever_their_type() {
        let one = [
            Bson::Int32(1),
            Bson::Int64(1),
            Bson::Double(1.0),
            decimal("1"),
            decimal("1.00"),
            decimal("0.1E+1"),
        ];
        for a in &one {
            for b in &one {
                assert!(bson_equal(a, b), "{a:?} {b:?}");
            }
        }
        assert!(bson_equal(&decimal("0.5"), &Bson::Double(0.5)));
        assert!(!bson_equal(&decimal("0.1"), &Bson::Double(0.1)));
        assert!(bson_equal(&decimal("-0"), &Bson::Int32(0)));
        assert!(bson_equal(&decimal("NaN"), &Bson::Double(f64::NAN)));
        assert!(!bson_equal(&decimal("1.01"), &Bson::Int32(1)));
        let big = (1_i64 << 53) + 1;
        assert!(!bson_equal(&Bson::Int64(big), &Bson::Double(big as f64)));
        assert!(bson_equal(
            &Bson::Int64(1 << 60),
            &Bson::Double((1_i64 << 60) as f64)
        ));
        assert!(bson_equal(
            &decimal("1152921504606846976"),
            &Bson::Double((1_i64 << 60) as f64)
        ));
        assert!(!bson_equal(
            &Bson::Int64(i64::MAX),
            &Bson::Double(i64::MAX as f64)
        ));
    }

    #[test]
    fn a_symbol_is_its_string_and_other_kinds_differ() {
        assert!(bson_equal(
            &Bson::Symbol("a".into()),
            &Bson::String("a".into())
        ));
        assert!(!bson_equal(&Bson::String("1".into()), &Bson::Int32(1)));
        assert!(!bson_equal(&decimal("1"), &Bson::String("1".into())));
    }
}
