//! This directory's producer id (the `TIER` file): which directory's claims in a manifest
//! are its own. Made once, at the first writable open with a tier; see docs/FORMAT.md.

use std::path::Path;

use super::PRODUCER_FILE;
use crate::error::{Error, Result};
use crate::io::Storage;

/// Its first word.
const MAGIC: &str = "tidelog-tier";
/// Its format version.
const VERSION: u32 = 1;
/// Hex digits of a producer id (128 bits).
const ID_DIGITS: usize = 32;

/// The producer id of `dir`, made (and made durable) when the directory has none.
pub fn producer_id(storage: &dyn Storage, dir: &Path) -> Result<String> {
    let path = dir.join(PRODUCER_FILE);
    match storage.read_file(&path) {
        Ok(bytes) => decode(&bytes).ok_or_else(|| Error::Corruption {
            topic: String::new(),
            offset: 0,
            path: path.clone(),
            position: 0,
            reason: "the tier producer file fails its checks".to_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(storage, dir),
        Err(e) => Err(Error::io("read tier producer file", &path, e)),
    }
}

/// `tidelog-tier 1 <id, 32 hex digits> <CRC-32 of the text before it, 8 hex digits>\n`.
fn encode(id: &str) -> String {
    let text = format!("{MAGIC} {VERSION} {id}");
    let crc = crc32fast::hash(text.as_bytes());
    format!("{text} {crc:08x}\n")
}

fn decode(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let (body, crc) = text.rsplit_once(' ')?;
    if crc.len() != 8
        || !crc
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    if u32::from_str_radix(crc, 16).ok()? != crc32fast::hash(body.as_bytes()) {
        return None;
    }
    let mut fields = body.split(' ');
    if fields.next()? != MAGIC || fields.next()? != VERSION.to_string() {
        return None;
    }
    let id = fields.next()?;
    let valid = id.len() == ID_DIGITS && id.bytes().all(|b| b.is_ascii_hexdigit());
    (valid && fields.next().is_none()).then(|| id.to_owned())
}

/// Writes a new id: to `TIER.tmp`, synced, renamed into place, the directory synced.
fn create(storage: &dyn Storage, dir: &Path) -> Result<String> {
    let id = new_id(storage)?;
    let tmp = dir.join(format!("{PRODUCER_FILE}.tmp"));
    let path = dir.join(PRODUCER_FILE);
    let _ = storage.remove_file(&tmp);
    let file = storage
        .create_new(&tmp)
        .map_err(|e| Error::io("create tier producer file", &tmp, e))?;
    storage
        .write_at(&file, &tmp, encode(&id).as_bytes(), 0)
        .map_err(|e| Error::io("write tier producer file", &tmp, e))?;
    storage
        .sync_file(&file, &tmp)
        .map_err(|e| Error::io("fsync tier producer file", &tmp, e))?;
    storage
        .rename(&tmp, &path)
        .map_err(|e| Error::io("rename tier producer file", &path, e))?;
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("fsync directory", dir, e))?;
    Ok(id)
}

/// 128 random bits from the kernel, as hex.
fn new_id(storage: &dyn Storage) -> Result<String> {
    let source = Path::new("/dev/urandom");
    let file = storage
        .open(source, false)
        .map_err(|e| Error::io("open", source, e))?;
    let mut bytes = [0u8; ID_DIGITS / 2];
    let n = storage
        .read_at(&file, source, &mut bytes, 0)
        .map_err(|e| Error::io("read", source, e))?;
    if n != bytes.len() {
        return Err(Error::io(
            "read",
            source,
            std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
        ));
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every flipped bit of the file is refused.
        #[test]
        fn flipped_bits_are_refused(at in 0usize..80, bit in 0u8..8) {
            let id = "0123456789abcdef0123456789abcdef";
            let bytes = encode(id).into_bytes();
            let decoded = decode(&bytes);
            prop_assert_eq!(decoded.as_deref(), Some(id));
            let mut flipped = bytes.clone();
            let i = at % flipped.len();
            flipped[i] ^= 1 << bit;
            prop_assert_eq!(decode(&flipped), None);
        }
    }
}
