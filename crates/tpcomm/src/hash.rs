//! Bit mixing for the identifiers derived from keys and secrets (the host
//! path's job key, the drop-in's standalone secret): not cryptographic, only
//! well spread.

/// A 64-bit finalizer (MurmurHash3's): every input bit affects every output
/// bit.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}
