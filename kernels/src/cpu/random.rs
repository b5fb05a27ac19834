//! The Threefry-2x32 block cipher (20 rounds), the counter-based generator
//! behind xform's random keys (as in JAX): a pure function of key and
//! counter, so vmap over keys equals a loop over them.

const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// Encrypts the counter `(x0, x1)` under the key `(k0, k1)`.
#[inline]
pub fn threefry2x32(k0: u32, k1: u32, x0: u32, x1: u32) -> (u32, u32) {
    let ks = [k0, k1, k0 ^ k1 ^ 0x1BD1_1BDA];
    let mut x = [x0.wrapping_add(ks[0]), x1.wrapping_add(ks[1])];
    for i in 0..5 {
        for &r in &ROTATIONS[i % 2] {
            x[0] = x[0].wrapping_add(x[1]);
            x[1] = x[1].rotate_left(r) ^ x[0];
        }
        x[0] = x[0].wrapping_add(ks[(i + 1) % 3]);
        x[1] = x[1].wrapping_add(ks[(i + 2) % 3]).wrapping_add(i as u32 + 1);
    }
    (x[0], x[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        // Random123's known-answer tests for threefry2x32_20.
        assert_eq!(threefry2x32(0, 0, 0, 0), (0x6b20_0159, 0x99ba_4efe));
        assert_eq!(threefry2x32(u32::MAX, u32::MAX, u32::MAX, u32::MAX), (0x1cb9_96fc, 0xbb00_2be7));
        assert_eq!(threefry2x32(0x1319_8a2e, 0x0370_7344, 0x243f_6a88, 0x85a3_08d3), (0xc492_3a9c, 0x483d_f7a0));
    }
}
