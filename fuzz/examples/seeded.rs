//! The fallback of `scripts/fuzz` when cargo-fuzz cannot build: runs the targets' checks over a
//! seeded random corpus (random bytes, and mutations of earlier inputs) for a bounded time.
//!
//! Usage: seeded TARGET SECONDS [SEED]   (TARGET: content_hash or key_encoding)

use std::time::{Duration, Instant};

/// xorshift64*: a small, seeded, reproducible generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: seeded content_hash|key_encoding SECONDS [SEED]";
    let target: fn(&[u8]) = match args.get(1).map(String::as_str) {
        Some("content_hash") => idem_fuzz::content_hash_target,
        Some("key_encoding") => idem_fuzz::key_encoding_target,
        _ => panic!("{usage}"),
    };
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).expect(usage);
    let seed: u64 = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x1de3_5eed);
    let mut rng = Rng(seed | 1);
    let mut corpus: Vec<Vec<u8>> = vec![
        b"{}".to_vec(),
        br#"{"a":[1,2.5,"x:y",null,{"b":true}]}"#.to_vec(),
    ];
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut runs = 0u64;
    while Instant::now() < deadline {
        let input = if corpus.is_empty() || rng.below(3) == 0 {
            let len = rng.below(512);
            (0..len).map(|_| rng.next() as u8).collect()
        } else {
            let mut input = corpus[rng.below(corpus.len())].clone();
            for _ in 0..=rng.below(8) {
                match rng.below(3) {
                    0 if !input.is_empty() => {
                        let i = rng.below(input.len());
                        input[i] = rng.next() as u8;
                    }
                    1 => {
                        let i = rng.below(input.len() + 1);
                        input.insert(i, rng.next() as u8);
                    }
                    _ if !input.is_empty() => {
                        input.remove(rng.below(input.len()));
                    }
                    _ => {}
                }
            }
            input
        };
        target(&input);
        if corpus.len() < 4096 && rng.below(16) == 0 {
            corpus.push(input);
        }
        runs += 1;
    }
    println!(
        "seeded {}: {runs} runs in {seconds} s (seed {seed}), no failure",
        args[1]
    );
}
