use super::{ContentHash, HashAlgorithm};

/// A prepared document holds its hash's text inline: every algorithm's text must fit whole,
/// or two hashes could be cut to the same text.
#[test]
fn every_algorithms_hash_text_fits_inline_whole() {
    let algorithms = [
        HashAlgorithm::Sha256,
        #[cfg(feature = "blake3")]
        HashAlgorithm::Blake3,
    ];
    for algorithm in algorithms {
        let bytes: [u8; 32] = std::array::from_fn(|at| (at * 37 + 11) as u8);
        let hash = ContentHash::from_parts(algorithm, bytes);
        assert_eq!(
            hash.to_short_text().as_str(),
            hash.to_hex(),
            "{algorithm:?}"
        );
    }
}
