//! LEB128 integers in their shortest form, so each value has exactly one encoding (a
//! checksum then covers one byte string per value).

/// Longest LEB128 encoding of a `u64`.
pub const VARINT_MAX: usize = 10;

/// Appends `v` as LEB128.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`put`] writes for `v`.
#[inline]
pub const fn len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads the LEB128 integer at the start of `bytes`: its value and length. `None` when cut,
/// longer than [`VARINT_MAX`], past 64 bits or not in its shortest form.
#[inline(always)]
pub fn get(bytes: &[u8]) -> Option<(u64, usize)> {
    // Most lengths and differences take one byte.
    match bytes.first() {
        Some(&b) if b < 0x80 => Some((u64::from(b), 1)),
        Some(_) => get_long(bytes),
        None => None,
    }
}

/// [`get`] of two bytes or more: two and three (an entry's index and its distance back in a
/// batch of a thousand records) unrolled.
#[inline(always)]
fn get_long(bytes: &[u8]) -> Option<(u64, usize)> {
    if let [b0, b1, rest @ ..] = bytes {
        let low = u64::from(b0 & 0x7F);
        if *b1 < 0x80 {
            return (*b1 != 0).then_some((low | u64::from(*b1) << 7, 2));
        }
        if let Some(&b2) = rest.first()
            && b2 < 0x80
        {
            let v = low | u64::from(b1 & 0x7F) << 7 | u64::from(b2) << 14;
            return (b2 != 0).then_some((v, 3));
        }
    }
    get_any(bytes)
}

/// [`get`] of any length.
#[inline(never)]
fn get_any(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    let mut i = 0;
    while i < VARINT_MAX {
        let b = *bytes.get(i)?;
        let low = u64::from(b & 0x7F);
        if i == VARINT_MAX - 1 && low > 1 {
            return None;
        }
        v |= low << (7 * i);
        if b & 0x80 == 0 {
            // A last byte of zero would make a longer form of a shorter value.
            return (b != 0).then_some((v, i + 1));
        }
        i += 1;
    }
    None
}

/// Maps a signed value to an unsigned one, small magnitudes to small numbers.
#[inline]
pub const fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub const fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_lengths() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put(&mut b, v);
            assert_eq!(b.len(), len(v), "{v}");
            assert_eq!(get(&b), Some((v, b.len())), "{v}");
            assert!(get(&b[..b.len() - 1]).is_none(), "cut {v}");
        }
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    proptest::proptest! {
        /// Any bytes read as a value only in that value's one encoding.
        #[test]
        fn a_read_is_the_one_encoding(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12)) {
            if let Some((v, n)) = get(&bytes) {
                let mut again = Vec::new();
                put(&mut again, v);
                proptest::prop_assert_eq!(&again[..], &bytes[..n]);
            }
        }

        #[test]
        fn every_value_round_trips(v in proptest::prelude::any::<u64>(), tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4)) {
            let mut b = Vec::new();
            put(&mut b, v);
            let n = b.len();
            proptest::prop_assert_eq!(n, len(v));
            b.extend_from_slice(&tail);
            proptest::prop_assert_eq!(get(&b), Some((v, n)));
        }
    }

    #[test]
    fn only_the_shortest_form_reads() {
        assert_eq!(get(&[0x80, 0x00]), None);
        assert_eq!(get(&[0x81, 0x00]), None);
        assert_eq!(get(&[0xFF; 11]), None);
        // 2^64 does not fit.
        let mut over = [0xFF; 10];
        over[9] = 0x02;
        assert_eq!(get(&over), None);
    }
}
