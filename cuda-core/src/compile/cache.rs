//! The compile cache: kernels compiled at run time (CUBIN, PTX or LTO-IR bytes) kept in memory
//! and on disk under the SHA-256 of everything that went into them, as CuPy's kernel cache and
//! cuda.core's program cache keep theirs.
//!
//! On disk each entry is one file, `<key as 64 hex digits>.bin`: a 60-byte header (the magic
//! `b"CUKCACHE"`, the format version as a little-endian `u32`, the 32-byte key, the payload's
//! length as a little-endian `u64`, the payload's 64-bit checksum, little-endian) and then the
//! payload. A file that fails any check when read is removed and counts as a miss: a corrupt or
//! truncated entry is compiled again, never loaded. Which directories and files are used at
//! all, and how they are written, is [`cache_dir`](super::cache_dir)'s to say.

use super::cache_dir::{self, CacheDir, Check, Look, OpenDir};
use super::checksum::checksum;
use super::sha256::Sha256;
use crate::error::Result;
use std::collections::HashMap;
use std::ffi::{CStr, OsString};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

const MAGIC: [u8; 8] = *b"CUKCACHE";
/// 4: the checksum folds eight words at a time, one multiply each.
const VERSION: u32 = 4;
const HEADER_LEN: usize = 8 + 4 + 32 + 8 + 8;

/// The identity of a compiled kernel: the SHA-256 of everything that decides its bytes (source,
/// options, headers, compiler version, target architecture).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey([u8; 32]);

impl CacheKey {
    /// The key of `parts`, in order. Each part is hashed after its length (a little-endian
    /// `u64`), so parts cannot run into each other: `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn new(parts: &[&[u8]]) -> CacheKey {
        let mut key = KeyHasher::new();
        parts.iter().for_each(|part| key.part(part));
        key.finish()
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The name of the key's file.
    fn file_name(&self) -> FileName {
        FileName::of(self)
    }
}

/// A key's file name, `<64 hexadecimal digits>.bin`, spelt by table on the stack with its
/// terminating NUL: a disk hit spells it every time.
struct FileName([u8; 69]);

impl FileName {
    fn of(key: &CacheKey) -> FileName {
        /// The two lowercase hexadecimal digits of each byte.
        const DIGITS: [[u8; 2]; 256] = {
            let digits = b"0123456789abcdef";
            let mut table = [[0; 2]; 256];
            let mut b = 0;
            while b < 256 {
                table[b] = [digits[b >> 4], digits[b & 15]];
                b += 1;
            }
            table
        };
        let mut name = *b"0000000000000000000000000000000000000000000000000000000000000000.bin\0";
        for (pair, &b) in name.chunks_exact_mut(2).zip(&key.0) {
            pair.copy_from_slice(&DIGITS[usize::from(b)]);
        }
        FileName(name)
    }

    fn as_c_str(&self) -> &CStr {
        CStr::from_bytes_with_nul(&self.0).unwrap_or_default()
    }

    #[cfg(test)]
    fn as_str(&self) -> &str {
        self.as_c_str().to_str().unwrap_or_default()
    }
}

/// A [`CacheKey`] under way: the parts hashed so far, each after its length, as
/// [`CacheKey::new`] hashes them. A clone goes on from the same point, so parts shared by many
/// keys are hashed once.
#[derive(Clone)]
pub(crate) struct KeyHasher(Sha256);

impl KeyHasher {
    pub(crate) fn new() -> KeyHasher {
        KeyHasher(Sha256::new())
    }

    /// Hashes the next part.
    pub(crate) fn part(&mut self, part: &[u8]) {
        self.0.update(&(part.len() as u64).to_le_bytes());
        self.0.update(part);
    }

    pub(crate) fn finish(self) -> CacheKey {
        CacheKey(self.0.finish())
    }
}

impl fmt::Display for CacheKey {
    /// The key as 64 lowercase hexadecimal digits, as in its file's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for CacheKey {
    /// The same 64 hexadecimal digits as [`Display`](fmt::Display).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Where a cached kernel was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheHit {
    /// In this process's memory.
    Memory,
    /// In a file of the cache's directory (and it is now in memory too).
    Disk,
}

/// What a [`CompileCache`] has done since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from memory.
    pub memory_hits: u64,
    /// Lookups answered from a file.
    pub disk_hits: u64,
    /// Lookups that found nothing (each then compiles, in `get_or_insert_with`).
    pub misses: u64,
    /// Entries stored (in memory, and on disk when the cache has a directory).
    pub writes: u64,
    /// Files that could not be written; those entries are in memory only.
    pub failed_writes: u64,
    /// Files found corrupt, truncated, or open to others (a symbolic link, a second hard link,
    /// not a regular file, another user's, writable by group or others, over 1 GiB): each was a
    /// miss and was removed. A file that could not be read for another reason (no descriptor
    /// left, an I/O error) is a miss and stays.
    pub rejected: u64,
    /// Lookups and writes that left the directory alone because another user could change what
    /// is in it (on Unix: it is not owned by the effective user, or group or others can write
    /// it); those entries are in memory only. Make the directory the user's with mode 0700, or
    /// use another one.
    pub untrusted_dir: u64,
    /// Compiles that went around the cache because NVRTC read files for them that the key
    /// does not cover (see [`Program::compile_with_cache`](super::Program::compile_with_cache)).
    pub uncached: u64,
}

#[derive(Default)]
struct Counters {
    memory_hits: AtomicU64,
    disk_hits: AtomicU64,
    misses: AtomicU64,
    writes: AtomicU64,
    failed_writes: AtomicU64,
    rejected: AtomicU64,
    untrusted_dir: AtomicU64,
    uncached: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

/// Compiled kernels by [`CacheKey`], in memory and, optionally, in a directory shared by every
/// process that uses it.
///
/// Disk failures never fail a compile: a file that cannot be read is a miss, and one that cannot
/// be written leaves the entry in memory only (both show in [`stats`](Self::stats)). The
/// checksum catches corruption, not tampering, so on Unix the directory is used only if nobody
/// but the effective user can change it: owned by that user, writable by neither group nor
/// others (the directories the cache creates are made so, mode 0700). Any other is neither read
/// nor written, and each refusal counts in [`CacheStats::untrusted_dir`]. On Unix the cache
/// keeps its directory open, so it goes on using the directory it opened even if another is
/// moved to its path; it checks the open directory again before each write and after each
/// read that finds nothing, and opens the path again when it finds the directory removed or
/// open to others, or is looked at under another effective user. An entry is opened without
/// following a link and used only if it is a regular file of that user with one link,
/// writable by neither group nor others, of at most 1 GiB, whose header names its key.
///
/// `Send + Sync`; clones are cheap and share the memory, the directory and the counters. The
/// memory holds every entry stored until [`clear_memory`](Self::clear_memory).
///
/// ```
/// use cuhost::compile::{CacheKey, CompileCache};
/// let cache = CompileCache::in_memory();
/// let key = CacheKey::new(&[b"__global__ void k() {}", b"--gpu-architecture=sm_90"]);
/// let (cubin, hit) = cache.get_or_insert_with(&key, || Ok(b"compiled bytes".to_vec()))?;
/// assert_eq!((&*cubin, hit), (&b"compiled bytes"[..], None));
/// assert!(cache.get(&key).is_some());
/// # Ok::<(), cuhost::Error>(())
/// ```
#[derive(Clone)]
pub struct CompileCache {
    inner: Arc<Inner>,
}

/// The entries kept in memory.
type Memory = HashMap<CacheKey, Arc<[u8]>, BuildHasherDefault<KeyBits>>;

struct Inner {
    memory: Option<Mutex<Memory>>,
    dir: Option<CacheDir>,
    counters: Counters,
}

/// The memory's hash of a [`CacheKey`]: its own bits, folded. A key is a SHA-256, so its bits
/// are spread evenly already and hashing them again would add nothing.
#[derive(Default)]
struct KeyBits(u64);

impl Hasher for KeyBits {
    fn write(&mut self, bytes: &[u8]) {
        for word in bytes.chunks(8) {
            let mut w = [0; 8];
            w[..word.len()].copy_from_slice(word);
            self.0 = self.0.rotate_left(19) ^ u64::from_le_bytes(w);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl CompileCache {
    fn with(memory: bool, dir: Option<PathBuf>) -> Self {
        let memory = memory.then(|| Mutex::new(HashMap::default()));
        let dir = dir.map(CacheDir::new);
        CompileCache { inner: Arc::new(Inner { memory, dir, counters: Counters::default() }) }
    }

    /// Memory and the user's cache directory: `$CUDA_CORE_CACHE_DIR` if set, else
    /// `$XDG_CACHE_HOME/cuda-core/kernels`, else `$HOME/.cache/cuda-core/kernels`
    /// (`%LOCALAPPDATA%\cuda-core\kernels` on Windows). With `CUDA_CORE_CACHE_DISABLE` set to
    /// anything but `0` or nothing, or with none of those variables set, memory only.
    pub fn new() -> Self {
        Self::with(true, default_dir(|name| std::env::var_os(name)))
    }

    /// Memory only.
    pub fn in_memory() -> Self {
        Self::with(true, None)
    }

    /// Memory and the directory `dir`, created on the first write.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self::with(true, Some(dir.into()))
    }

    /// No memory and no disk: every lookup misses and every kernel is compiled.
    pub fn disabled() -> Self {
        Self::with(false, None)
    }

    /// The process's cache, a [`new`](Self::new) made on first use.
    pub fn global() -> &'static CompileCache {
        static GLOBAL: OnceLock<CompileCache> = OnceLock::new();
        GLOBAL.get_or_init(CompileCache::new)
    }

    /// The directory of the files, if the cache has one.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_ref().map(CacheDir::path)
    }

    /// The kernel stored under `key`, looked for in memory, then on disk (a disk hit is kept in
    /// memory too); `None` on a miss.
    pub fn get(&self, key: &CacheKey) -> Option<(Arc<[u8]>, CacheHit)> {
        let counters = &self.inner.counters;
        if let Some(bytes) = self.memory_get(key) {
            bump(&counters.memory_hits);
            return Some((bytes, CacheHit::Memory));
        }
        if let Some(bytes) = self.inner.dir.as_ref().and_then(|dir| self.read(dir, key)) {
            bump(&counters.disk_hits);
            self.memory_put(key, bytes.clone());
            return Some((bytes, CacheHit::Disk));
        }
        bump(&counters.misses);
        None
    }

    /// Stores `bytes` under `key`, in memory and on disk, replacing what was there. A file that
    /// cannot be written counts in [`CacheStats::failed_writes`]; nothing fails.
    pub fn put(&self, key: &CacheKey, bytes: &[u8]) {
        self.store(key, Arc::from(bytes));
    }

    /// The kernel stored under `key`, or the one `compile` makes, stored. The second value says
    /// where it was found, `None` when it was compiled now. Fails only when `compile` does, and
    /// then stores nothing. Two threads that miss at once both compile.
    pub fn get_or_insert_with(
        &self,
        key: &CacheKey,
        compile: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<(Arc<[u8]>, Option<CacheHit>)> {
        if let Some((bytes, hit)) = self.get(key) {
            return Ok((bytes, Some(hit)));
        }
        let bytes: Arc<[u8]> = compile()?.into();
        self.store(key, bytes.clone());
        Ok((bytes, None))
    }

    /// Forgets what is in memory; the files stay.
    pub fn clear_memory(&self) {
        if let Some(memory) = &self.inner.memory {
            memory.lock().unwrap_or_else(PoisonError::into_inner).clear();
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        let c = &self.inner.counters;
        CacheStats {
            memory_hits: c.memory_hits.load(Relaxed),
            disk_hits: c.disk_hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            writes: c.writes.load(Relaxed),
            failed_writes: c.failed_writes.load(Relaxed),
            rejected: c.rejected.load(Relaxed),
            untrusted_dir: c.untrusted_dir.load(Relaxed),
            uncached: c.uncached.load(Relaxed),
        }
    }

    /// Counts a compile that did not use the cache (in [`CacheStats::uncached`]).
    pub(crate) fn count_uncached(&self) {
        bump(&self.inner.counters.uncached);
    }

    fn store(&self, key: &CacheKey, bytes: Arc<[u8]>) {
        if self.inner.memory.is_none() && self.inner.dir.is_none() {
            return;
        }
        if let Some(dir) = &self.inner.dir {
            self.write_file(dir, key, &bytes);
        }
        self.memory_put(key, bytes);
        bump(&self.inner.counters.writes);
    }

    fn memory_get(&self, key: &CacheKey) -> Option<Arc<[u8]>> {
        let memory = self.inner.memory.as_ref()?;
        memory.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    fn memory_put(&self, key: &CacheKey, bytes: Arc<[u8]>) {
        if let Some(memory) = &self.inner.memory {
            memory.lock().unwrap_or_else(PoisonError::into_inner).insert(*key, bytes);
        }
    }

    /// Writes `key`'s file, in a directory created private or found private; a failure counts
    /// in [`CacheStats::failed_writes`].
    fn write_file(&self, dir: &CacheDir, key: &CacheKey, payload: &[u8]) {
        let write = || -> io::Result<()> {
            let look = match dir.look(Check::Now) {
                Look::Missing => {
                    dir.create()?;
                    dir.look(Check::Now)
                }
                look => look,
            };
            match (self.usable(&look), look) {
                (Some(open), _) => {
                    let written = open.write(key.file_name().as_c_str(), &[&header(key, payload), payload]);
                    if written.as_ref().is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
                        dir.forget(&open);
                    }
                    written
                }
                // Made, but it cannot be opened (no descriptor left, or removed again at once).
                (None, Look::Missing) => Err(io::ErrorKind::NotFound.into()),
                // Left alone, and counted.
                (None, _) => Ok(()),
            }
        };
        // A directory gone since it was checked (on a file system whose link count did not say
        // so) is let go by the failed write, and looked for (or made) once more.
        let written = match write() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => write(),
            written => written,
        };
        if written.is_err() {
            bump(&self.inner.counters.failed_writes);
        }
    }

    /// The directory a look found, if it may be used; one another user can change counts in
    /// [`CacheStats::untrusted_dir`].
    fn usable(&self, look: &Look) -> Option<Arc<OpenDir>> {
        match look {
            Look::Open(open) => Some(open.clone()),
            Look::Missing => None,
            Look::Untrusted => {
                bump(&self.inner.counters.untrusted_dir);
                None
            }
        }
    }

    /// The payload of `key`'s file if it passes every check. The directory held is read as last
    /// checked; when it has no usable entry, it is checked now, and if it was let go (removed,
    /// or open to others) the directory now at the path is read.
    fn read(&self, dir: &CacheDir, key: &CacheKey) -> Option<Arc<[u8]>> {
        let held = self.usable(&dir.look(Check::Held))?;
        if let Some(payload) = self.read_entry(&held, key) {
            return Some(payload);
        }
        let now = self.usable(&dir.look(Check::Now))?;
        if Arc::ptr_eq(&now, &held) { None } else { self.read_entry(&now, key) }
    }

    /// The payload of `key`'s file in `open`, if it is there and passes every check. A file
    /// that fails a check is removed and counted in [`CacheStats::rejected`]; one that could not
    /// be opened or read for another reason (no descriptor left, an I/O error) is left for a
    /// later look.
    fn read_entry(&self, open: &OpenDir, key: &CacheKey) -> Option<Arc<[u8]>> {
        let name = key.file_name();
        let mut head = [0; HEADER_LEN];
        match open.read(name.as_c_str(), &mut head) {
            Ok(Some(payload)) if intact(key, &head, &payload) => return Some(payload),
            Ok(_) => {}
            Err(e) if cache_dir::refused(&e) => {}
            Err(_) => return None,
        }
        bump(&self.inner.counters.rejected);
        // Best effort: a file that cannot be removed is rejected again next time, and a valid
        // file another process renamed here meanwhile goes too (one more compile, no harm).
        let _ = open.remove(name.as_c_str());
        None
    }
}

impl Default for CompileCache {
    /// [`CompileCache::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for CompileCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompileCache")
            .field("memory", &self.inner.memory.is_some())
            .field("dir", &self.dir())
            .field("stats", &self.stats())
            .finish()
    }
}

/// The directory [`CompileCache::new`] uses, reading the environment through `var`.
fn default_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if set("CUDA_CORE_CACHE_DISABLE").is_some_and(|v| v != "0") {
        return None;
    }
    if let Some(dir) = set("CUDA_CORE_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = if cfg!(windows) {
        set("LOCALAPPDATA").map(PathBuf::from)
    } else {
        // The XDG specification ignores a relative XDG_CACHE_HOME.
        let xdg = set("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        xdg.or_else(|| set("HOME").map(|home| Path::new(&home).join(".cache")))
    };
    base.map(|b| b.join("cuda-core").join("kernels"))
}

/// Whether `head` and `payload`, read from a file, are an entry of `key`, whole and intact.
fn intact(key: &CacheKey, head: &[u8; HEADER_LEN], payload: &[u8]) -> bool {
    let (magic, rest) = head.split_at(8);
    let (version, rest) = rest.split_at(4);
    let (stored_key, rest) = rest.split_at(32);
    let (length, sum) = rest.split_at(8);
    let number = |bytes: &[u8]| bytes.try_into().map(u64::from_le_bytes).ok();
    magic == MAGIC
        && version == VERSION.to_le_bytes()
        && stored_key == key.as_bytes()
        && number(length) == Some(payload.len() as u64)
        && number(sum) == Some(checksum(payload))
}

fn header(key: &CacheKey, payload: &[u8]) -> [u8; HEADER_LEN] {
    let mut header = [0; HEADER_LEN];
    let fields: [&[u8]; 5] = [
        &MAGIC,
        &VERSION.to_le_bytes(),
        key.as_bytes(),
        &(payload.len() as u64).to_le_bytes(),
        &checksum(payload).to_le_bytes(),
    ];
    let mut at = 0;
    for field in fields {
        header[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    }
    header
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use crate::compile::cache_dir::MAX_FILE_BYTES;
    use crate::compile::sha256::sha256;
    use std::cell::Cell;
    use std::fs;

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static N: AtomicU64 = AtomicU64::new(0);
            let name = format!("cuda-core-cache-unit-{}-{}", std::process::id(), N.fetch_add(1, Relaxed));
            let path = std::env::temp_dir().join(name);
            let _ = fs::remove_dir_all(&path);
            TempDir(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn keys_separate_parts_order_and_splits() {
        let k = |parts: &[&[u8]]| CacheKey::new(parts);
        assert_eq!(k(&[b"ab", b"c"]), k(&[b"ab", b"c"]));
        assert_ne!(k(&[b"ab", b"c"]), k(&[b"a", b"bc"]));
        assert_ne!(k(&[b"ab", b"c"]), k(&[b"c", b"ab"]));
        assert_ne!(k(&[b"abc"]), k(&[b"ab", b"c"]));
        assert_ne!(k(&[]), k(&[b""]));
        assert_ne!(k(&[b""]), k(&[b"", b""]));
        // The length prefix is a little-endian u64 before each part.
        let mut framed = 3u64.to_le_bytes().to_vec();
        framed.extend_from_slice(b"abc");
        assert_eq!(k(&[b"abc"]).as_bytes(), &sha256(&[&framed]));
        let key = k(&[b"abc"]);
        let text = key.to_string();
        assert_eq!(text.len(), 64);
        assert!(text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{text}");
        assert_eq!(text, crate::hex::encode(key.as_bytes()));
        assert_eq!(format!("{key:?}"), text);
        assert_eq!(key.file_name().as_str(), format!("{text}.bin"));
    }

    /// The payload of a file's bytes `data` if they are an entry of `key`, whole and intact.
    fn decode<'a>(key: &CacheKey, data: &'a [u8]) -> Option<&'a [u8]> {
        let (head, payload) = data.split_first_chunk::<HEADER_LEN>()?;
        intact(key, head, payload).then_some(payload)
    }

    /// The bytes of a valid file of `key` holding `payload`.
    #[cfg(unix)]
    fn entry(key: &CacheKey, payload: &[u8]) -> Vec<u8> {
        let mut file = header(key, payload).to_vec();
        file.extend_from_slice(payload);
        file
    }

    /// `path`'s permission bits set to `mode`.
    #[cfg(unix)]
    fn chmod(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Gives `path` to another user where this process may (as root), and says whether it did.
    #[cfg(unix)]
    fn give_away(path: &Path) -> bool {
        // SAFETY: geteuid takes nothing and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            println!("not root: a file of another user cannot be made, that case is not checked");
            return false;
        }
        std::os::unix::fs::chown(path, Some(4242), Some(4242)).unwrap();
        true
    }

    /// H4: a link where an entry should be is not followed, even to a valid entry of the same
    /// key, nor is a second hard link to one read; a pipe there neither blocks nor is read; the
    /// directories the cache makes, and its files, are its owner's alone.
    #[cfg(unix)]
    #[test]
    fn links_and_pipes_are_refused_and_what_the_cache_makes_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new();
        let cache_dir = dir.0.join("nested");
        let key = CacheKey::new(&[b"linked"]);
        let cache = CompileCache::at(&cache_dir);
        let other = CacheKey::new(&[b"other"]);
        cache.put(&other, b"x");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&cache_dir), 0o700, "the cache directory is private");
        assert_eq!(mode(&cache_dir.join(other.file_name().as_str())), 0o600, "its files are private");

        let elsewhere = dir.0.join("valid.bin");
        fs::write(&elsewhere, entry(&key, b"planted")).unwrap();
        chmod(&elsewhere, 0o600);
        let path = cache_dir.join(key.file_name().as_str());
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let fresh = CompileCache::at(&cache_dir);
        assert_eq!(fresh.get(&key), None, "a link is not followed");
        assert_eq!(fresh.stats().rejected, 1);
        assert!(fs::symlink_metadata(&path).is_err(), "the link is removed");
        assert!(elsewhere.exists(), "not what it pointed to");

        let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
        assert_eq!(fresh.get(&key), None, "a pipe is not read (nor does its open wait for a writer)");
        assert_eq!(fresh.stats().rejected, 2);

        // A hard link to a valid entry of the user's: another name for a file that may sit in a
        // directory others can write.
        fs::hard_link(&elsewhere, &path).unwrap();
        assert_eq!(fresh.get(&key), None, "a second link is not read");
        assert_eq!(fresh.stats().rejected, 3);
        assert!(fs::symlink_metadata(&path).is_err(), "the link is removed");
        assert!(elsewhere.exists(), "not the file it named");
        fs::rename(&elsewhere, &path).unwrap();
        let (bytes, hit) = fresh.get(&key).unwrap();
        assert_eq!((&*bytes, hit), (&b"planted"[..], CacheHit::Disk), "the same file with one link is read");
    }

    /// H4: a file larger than the cap, or one that group or others (or another user) could
    /// write, is refused and removed without being used.
    #[cfg(unix)]
    #[test]
    fn oversize_and_shared_files_are_refused() {
        let dir = TempDir::new();
        let key = CacheKey::new(&[b"refused"]);
        let path = dir.0.join(key.file_name().as_str());
        let cache = CompileCache::at(&dir.0);
        cache.put(&CacheKey::new(&[b"makes the directory"]), b"x");
        let plant = |mode: u32| {
            fs::write(&path, entry(&key, b"planted")).unwrap();
            chmod(&path, mode);
        };
        plant(0o600);
        assert!(CompileCache::at(&dir.0).get(&key).is_some(), "a private file of the user is read");

        let mut refused = 0;
        let mut refuse = |what: &str| {
            let fresh = CompileCache::at(&dir.0);
            assert_eq!(fresh.get(&key), None, "{what}");
            assert_eq!(fresh.stats().rejected, 1, "{what}");
            assert!(!path.exists(), "{what}: removed");
            refused += 1;
        };
        plant(0o620);
        refuse("group-writable");
        plant(0o602);
        refuse("writable by others");
        plant(0o600);
        // Sparse: nothing is written, and nothing is read.
        fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(MAX_FILE_BYTES + 1).unwrap();
        refuse("over the cap");
        plant(0o600);
        if give_away(&path) {
            refuse("another user's");
        }
        assert!(refused >= 3);
    }

    /// H4: a directory another user can change is not read or written: the cache keeps to
    /// memory and counts each refusal.
    #[cfg(unix)]
    #[test]
    fn directories_others_can_write_are_not_used() {
        let key = CacheKey::new(&[b"shared directory"]);
        let check = |what: &str, dir: &Path| {
            let path = dir.join(key.file_name().as_str());
            fs::write(&path, entry(&key, b"planted")).unwrap();
            chmod(&path, 0o600);
            let cache = CompileCache::at(dir);
            assert_eq!(cache.get(&key), None, "{what}: a planted entry is not read");
            let other = CacheKey::new(&[b"another kernel"]);
            let (bytes, hit) = cache.get_or_insert_with(&other, || Ok(b"compiled".to_vec())).unwrap();
            assert_eq!((&*bytes, hit), (&b"compiled"[..], None), "{what}");
            assert_eq!(cache.get(&other).map(|(_, hit)| hit), Some(CacheHit::Memory), "{what}");
            assert!(!dir.join(other.file_name().as_str()).exists(), "{what}: nothing is written there");
            let stats = cache.stats();
            assert_eq!((stats.untrusted_dir, stats.rejected, stats.failed_writes), (3, 0, 0), "{what}");
            assert!(path.exists(), "{what}: the directory is left alone");
        };
        for mode in [0o770, 0o707, 0o1777] {
            let dir = TempDir::new();
            fs::create_dir(&dir.0).unwrap();
            chmod(&dir.0, mode);
            check(&format!("mode {mode:o}"), &dir.0);
        }
        let dir = TempDir::new();
        fs::create_dir(&dir.0).unwrap();
        chmod(&dir.0, 0o700);
        if give_away(&dir.0) {
            check("another user's", &dir.0);
        }
        // A private directory (group and others may read it) with a private entry is used.
        let private = TempDir::new();
        fs::create_dir(&private.0).unwrap();
        chmod(&private.0, 0o755);
        let path = private.0.join(key.file_name().as_str());
        fs::write(&path, entry(&key, b"kept")).unwrap();
        chmod(&path, 0o644);
        let cache = CompileCache::at(&private.0);
        assert_eq!(cache.get(&key).map(|(bytes, _)| bytes.to_vec()), Some(b"kept".to_vec()));
        assert_eq!(cache.stats().untrusted_dir, 0);
    }

    #[test]
    fn damaged_files_are_removed_and_compiled_again() {
        let key = CacheKey::new(&[b"damaged"]);
        let payload = b"a kernel's bytes, long enough to damage".to_vec();
        let other_file = {
            let dir = TempDir::new();
            let other = CacheKey::new(&[b"another kernel"]);
            CompileCache::at(&dir.0).put(&other, &payload);
            fs::read(dir.0.join(other.file_name().as_str())).unwrap()
        };
        type Damage<'a> = &'a dyn Fn(&mut Vec<u8>);
        let damages: [(&str, Damage); 9] = [
            ("a payload byte flipped", &|f| f[HEADER_LEN + 3] ^= 1),
            ("a checksum byte flipped", &|f| f[HEADER_LEN - 1] ^= 0x80),
            ("truncated payload", &|f| f.truncate(f.len() - 1)),
            ("truncated header", &|f| f.truncate(HEADER_LEN - 5)),
            ("empty", &|f| f.clear()),
            ("a byte too many", &|f| f.push(0)),
            ("wrong magic", &|f| f[0] = b'X'),
            ("another version", &|f| f[8] ^= 0x40),
            ("another key's file", &|f| f.clone_from(&other_file)),
        ];
        for (what, damage) in damages {
            let dir = TempDir::new();
            let path = dir.0.join(key.file_name().as_str());
            CompileCache::at(&dir.0).put(&key, &payload);
            let mut file = fs::read(&path).unwrap();
            damage(&mut file);
            fs::write(&path, &file).unwrap();

            let cache = CompileCache::at(&dir.0);
            assert_eq!(cache.get(&key), None, "{what}");
            assert_eq!(cache.stats().rejected, 1, "{what}");
            assert!(!path.exists(), "{what}: the bad file is removed");

            fs::write(&path, &file).unwrap();
            let compiled = Cell::new(false);
            let (bytes, hit) = cache
                .get_or_insert_with(&key, || {
                    compiled.set(true);
                    Ok(payload.clone())
                })
                .unwrap();
            assert!(compiled.get(), "{what}: compiled again");
            assert_eq!((&*bytes, hit), (&payload[..], None), "{what}");
            assert_eq!(cache.stats().rejected, 2, "{what}");
            assert_eq!(decode(&key, &fs::read(&path).unwrap()), Some(&payload[..]), "{what}: rewritten");
            assert_eq!(CompileCache::at(&dir.0).get(&key).map(|(_, hit)| hit), Some(CacheHit::Disk));
        }
    }

    #[test]
    fn the_default_directory_follows_the_environment() {
        let dir = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, OsString)> = vars.iter().map(|(k, v)| (k.to_string(), v.into())).collect();
            default_dir(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
        };
        let all =
            [("CUDA_CORE_CACHE_DIR", "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h"), ("LOCALAPPDATA", "/l")];
        assert_eq!(dir(&all), Some(PathBuf::from("/c")));
        assert_eq!(dir(&[("CUDA_CORE_CACHE_DISABLE", "1"), all[0]]), None);
        assert_eq!(dir(&[("CUDA_CORE_CACHE_DISABLE", "0"), all[0]]), Some(PathBuf::from("/c")));
        assert_eq!(dir(&[("CUDA_CORE_CACHE_DIR", ""), ("CUDA_CORE_CACHE_DISABLE", "")]), None);
        let kernels = |base: &str| Some(Path::new(base).join("cuda-core").join("kernels"));
        if cfg!(windows) {
            assert_eq!(dir(&all[1..]), kernels("/l"));
        } else {
            assert_eq!(dir(&all[1..]), kernels("/x"));
            assert_eq!(dir(&[("XDG_CACHE_HOME", "relative"), all[2]]), kernels("/h/.cache"));
            assert_eq!(dir(&all[2..3]), kernels("/h/.cache"));
        }
    }
}
