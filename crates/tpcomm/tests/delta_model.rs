//! The host path's delta words (kernels/host_allreduce.cu, `delta`), element
//! by element, checked with proptest: a writer and a reader that each keep
//! the previous content of a buffer (their shadows) must agree on every
//! value, and every write must differ from what the buffer held before, so
//! the reader can tell that it landed. Inputs are drawn to repeat often
//! (the "same again" case) and to include all-ones elements (the sentinel).
//!
//! This mirrors the CUDA functions delta_encode_word, delta_word_new and
//! delta_decode_word for 32-bit words (f32) and 16-bit halves (bf16, f16),
//! with canon_word32 / canon_halves applied first as senders do.

use proptest::prelude::*;

const ONES32: u32 = 0xffff_ffff;

fn canon32(w: u32) -> u32 {
    if w == ONES32 {
        0x7fff_ffff
    } else {
        w
    }
}

fn canon_half(h: u32) -> u32 {
    if h == 0xffff {
        0x7fff
    } else {
        h
    }
}

/// One element of `bits` bits (16 or 32) as the kernel treats it.
#[derive(Clone, Copy)]
struct Elem {
    bits: u32,
}

impl Elem {
    fn ones(self) -> u32 {
        if self.bits == 32 {
            ONES32
        } else {
            0xffff
        }
    }
    fn canon(self, v: u32) -> u32 {
        if self.bits == 32 {
            canon32(v)
        } else {
            canon_half(v & 0xffff)
        }
    }
    fn encode(self, v: u32, old: u32) -> u32 {
        if v != old {
            v
        } else {
            self.ones()
        }
    }
    fn is_new(self, x: u32, old: u32) -> bool {
        x != old
    }
    fn decode(self, x: u32, old: u32) -> u32 {
        if x == self.ones() {
            old
        } else {
            x
        }
    }
}

/// Values drawn from a small pool (so repeats are common) or anything,
/// all-ones included.
fn values(bits: u32) -> impl Strategy<Value = Vec<u32>> {
    let mask = if bits == 32 { ONES32 } else { 0xffff };
    let one = prop_oneof![
        4 => (0u32..4).prop_map(move |k| [0, 1, mask, 0x3f80 & mask][k as usize]),
        1 => any::<u32>().prop_map(move |v| v & mask),
    ];
    prop::collection::vec(one, 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A run of calls on one element of one buffer: the writer's shadow,
    /// the host word and the reader's shadow start as the sentinel.
    #[test]
    fn every_write_is_new_and_decodes_to_the_sent_value(
        bits in prop_oneof![Just(16u32), Just(32u32)],
        calls in values(32),
    ) {
        let e = Elem { bits };
        let (mut writer, mut host, mut reader) = (e.ones(), e.ones(), e.ones());
        for (k, &input) in calls.iter().enumerate() {
            let sent = e.canon(input);
            prop_assert_ne!(sent, e.ones(), "canon data is never the sentinel");
            let raw = e.encode(sent, writer);
            writer = raw;
            // Before the write lands the reader must see nothing new.
            prop_assert!(!e.is_new(host, reader), "call {}: stale content looks new", k);
            host = raw;
            prop_assert!(e.is_new(host, reader), "call {}: the write is not new", k);
            prop_assert_eq!(e.decode(host, reader), sent, "call {}", k);
            reader = host;
            prop_assert_eq!(writer, reader);
        }
    }

    /// Calls of changing sizes leave elements past the message untouched on
    /// both sides, which must then still agree when a later call reaches
    /// them again.
    #[test]
    fn elements_skipped_by_short_calls_stay_in_step(
        sizes in prop::collection::vec(1usize..16, 1..60),
        seed in any::<u64>(),
    ) {
        let e = Elem { bits: 16 };
        let mut writer = [e.ones(); 16];
        let mut host = [e.ones(); 16];
        let mut reader = [e.ones(); 16];
        let mut x = seed | 1;
        for &n in &sizes {
            for i in 0..n {
                // xorshift, few distinct values so repeats happen
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let sent = e.canon((x % 3) as u32 * 0x7fff);
                prop_assert!(!e.is_new(host[i], reader[i]));
                let raw = e.encode(sent, writer[i]);
                writer[i] = raw;
                host[i] = raw;
                prop_assert!(e.is_new(host[i], reader[i]));
                prop_assert_eq!(e.decode(host[i], reader[i]), sent);
                reader[i] = host[i];
            }
        }
        prop_assert_eq!(writer, reader);
    }
}

#[test]
fn the_same_value_twice_is_sent_as_the_sentinel_and_read_back() {
    let e = Elem { bits: 32 };
    let old = 0x3f80_0000; // 1.0f32, what the buffer held
    let raw = e.encode(0x3f80_0000, old);
    assert_eq!(raw, ONES32);
    assert!(e.is_new(raw, old));
    assert_eq!(e.decode(raw, old), 0x3f80_0000);
    // A buffer holding the sentinel takes any canon value as it is.
    assert_eq!(e.encode(0x4000_0000, ONES32), 0x4000_0000);
}
