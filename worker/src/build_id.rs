//! Which build of podq a binary is, and which glibc it needs: what decides whether the
//! agent on a TPU host must be replaced, and whether the worker's binary can run there.

use std::path::Path;

use sha2::{Digest, Sha256};

/// A binary's build id: the sha256 of its bytes. Two builds of the same version differ in
/// it (the crate version does not), and a copy of the same build does not.
/// A file's build id, hashed again only when its size or modification time changes: the
/// agent binary is checked on every launch, and hashing it each time was slow, while an
/// operator replacing it under a running worker must still be noticed.
/// Clones share one cache.
#[derive(Default, Clone)]
pub struct BuildIdCache(std::sync::Arc<std::sync::Mutex<Option<Hashed>>>);

/// A file hashed: its path, size and modification time then, and its build id.
type Hashed = (std::path::PathBuf, u64, std::time::SystemTime, String);

impl BuildIdCache {
    pub fn of_file(&self, path: &Path) -> std::io::Result<String> {
        let meta = std::fs::metadata(path)?;
        let (len, modified) = (meta.len(), meta.modified()?);
        let mut cached = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, l, m, id)) = cached.as_ref() {
            if p == path && *l == len && *m == modified {
                return Ok(id.clone());
            }
        }
        let id = of_file(path)?;
        *cached = Some((path.to_owned(), len, modified, id.clone()));
        Ok(id)
    }
}

pub fn of_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// This program's build id (`podq build-id`).
pub fn own() -> std::io::Result<String> {
    of_file(&std::env::current_exe()?)
}

/// The newest glibc symbol version a dynamically linked binary asks for (`GLIBC_2.34` is
/// `(2, 34)`), from the version names its dynamic string table holds; `None` for a binary
/// that needs no glibc (static, musl).
pub fn required_glibc(binary: &[u8]) -> Option<(u32, u32)> {
    const TAG: &[u8] = b"GLIBC_";
    // memchr's substring search: a debug build of podq is ~90 MB, which a byte-by-byte
    // window scan took seconds over.
    memchr::memmem::find_iter(binary, TAG)
        .filter_map(|found| {
            let start = found + TAG.len();
            let digits: Vec<u8> = binary[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit() || **b == b'.')
                .copied()
                .collect();
            // A version name ends the string: `GLIBC_2.34\0`, not `GLIBC_PRIVATE`.
            if binary.get(start + digits.len()) != Some(&0) {
                return None;
            }
            let text = String::from_utf8_lossy(&digits);
            let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
            match (parts.next(), parts.next()) {
                (Some(Some(major)), Some(Some(minor))) => Some((major, minor)),
                _ => None,
            }
        })
        .max()
}

/// `2.35` as `(2, 35)`.
pub fn parse_glibc(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_build_id_follows_the_file() {
        let path = std::env::temp_dir().join(format!("podq-build-id-{}", std::process::id()));
        std::fs::write(&path, b"one build").unwrap();
        let cache = BuildIdCache::default();
        let first = cache.of_file(&path).unwrap();
        assert_eq!(first, of_file(&path).unwrap());
        assert_eq!(cache.of_file(&path).unwrap(), first);
        // Replaced by another build (another size): hashed again.
        std::fs::write(&path, b"another, longer build").unwrap();
        let second = cache.of_file(&path).unwrap();
        assert_ne!(second, first);
        assert_eq!(second, of_file(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_newest_glibc_version_name_is_found() {
        let table = b"\0libc.so.6\0GLIBC_2.2.5\0GLIBC_2.34\0GLIBC_PRIVATE\0GLIBC_2.17\0";
        assert_eq!(required_glibc(table), Some((2, 34)));
        assert_eq!(required_glibc(b"\0no glibc here\0"), None);
        assert_eq!(parse_glibc("2.35\n"), Some((2, 35)));
        assert_eq!(parse_glibc(""), None);
    }
}
