//! Content hashes (spec section 2): the encoding of a float (2.1, 2.3).

/// A float as the content hash encodes it: tag `04`, then the IEEE 754 binary64 bits, big-endian,
/// with every NaN written as `7ff8000000000000` and `-0.0` as `0.0` (2.3). An `f32` is widened to
/// `f64` first, exactly, by `f64::from`.
pub fn float(value: f64) -> [u8; 9] {
    let bits = if value.is_nan() {
        0x7ff8_0000_0000_0000
    } else if value == 0.0 {
        0
    } else {
        value.to_bits()
    };
    let mut encoding = [0x04; 9];
    encoding[1..].copy_from_slice(&bits.to_be_bytes());
    encoding
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_canonical_bits() {
        assert_eq!(
            float(f64::from(0.1f32))[1..],
            0x3fb9_9999_a000_0000u64.to_be_bytes()
        );
        let nan = f64::from_bits(0xfff0_0000_0000_0001);
        assert_eq!(float(nan), float(f64::NAN));
        assert_eq!(float(f64::NAN)[1..], 0x7ff8_0000_0000_0000u64.to_be_bytes());
        assert_eq!(float(-0.0), [0x04, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            float(f64::NEG_INFINITY)[1..],
            f64::NEG_INFINITY.to_bits().to_be_bytes()
        );
        assert_eq!(float(1.5)[0], 0x04);
    }
}
