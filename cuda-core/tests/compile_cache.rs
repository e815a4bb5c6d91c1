//! The compile cache's public layer on a CPU: threads and processes writing and reading one
//! directory at once. Every reader sees a whole entry or none, and the directory ends with one
//! valid file per key and no temporaries.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use cuhost::compile::{CacheHit, CacheKey, CacheStats, CompileCache};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

/// Set in a child process: the directory it writes to, as a writer.
const WRITER_DIR: &str = "CUDA_CORE_COMPILE_CACHE_TEST_WRITER_DIR";
const KEYS: usize = 16;

/// A fresh directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("cuda-core-compile-cache-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn key(i: usize) -> CacheKey {
    CacheKey::new(&[b"compile_cache test", &(i as u64).to_le_bytes()])
}

/// Large enough that a write takes a while, different for every key.
fn payload(i: usize) -> Vec<u8> {
    (0..50_000 + 1000 * i).map(|j| (j * 31 + i * 7 + j / 251) as u8).collect()
}

/// The directory holds exactly one valid file for each of the first `keys` keys.
fn assert_valid(dir: &Path, keys: usize) {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    let mut expected: Vec<String> = (0..keys).map(|i| format!("{}.bin", key(i))).collect();
    expected.sort();
    assert_eq!(names, expected, "one file a key, no temporaries left");
    let cache = CompileCache::at(dir);
    for i in 0..keys {
        let (bytes, hit) = cache.get(&key(i)).unwrap();
        assert_eq!(hit, CacheHit::Disk);
        assert!(*bytes == payload(i), "key {i}'s payload");
    }
    assert_eq!(cache.stats().rejected, 0);
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn memory_hits_and_a_disabled_cache_always_compiles() {
    fn shared_between_threads<T: Send + Sync + Clone>() {}
    shared_between_threads::<CompileCache>();
    let cache = CompileCache::in_memory();
    let key = CacheKey::new(&[b"memory"]);
    assert_eq!(cache.get(&key), None);
    cache.put(&key, b"cubin");
    let (bytes, hit) = cache.get(&key).unwrap();
    assert_eq!((&*bytes, hit), (&b"cubin"[..], CacheHit::Memory));
    let (bytes, hit) = cache.get_or_insert_with(&key, || panic!("a hit must not compile")).unwrap();
    assert_eq!((&*bytes, hit), (&b"cubin"[..], Some(CacheHit::Memory)));
    let other = CacheKey::new(&[b"other"]);
    let failed = cache.get_or_insert_with(&other, || Err(cuhost::Error::invalid("compile", "bad source")));
    assert_eq!(failed.unwrap_err(), cuhost::Error::invalid("compile", "bad source"));
    assert_eq!(cache.get(&other), None, "a failed compile stores nothing");
    let stats = cache.stats();
    assert_eq!((stats.memory_hits, stats.disk_hits, stats.misses, stats.writes), (2, 0, 3, 1));
    cache.clear_memory();
    assert_eq!(cache.get(&key), None);
    assert_eq!(cache.dir(), None);

    let disabled = CompileCache::disabled();
    disabled.put(&key, b"cubin");
    assert_eq!(disabled.get(&key), None);
    let runs = Cell::new(0);
    for _ in 0..2 {
        let (bytes, hit) = disabled
            .get_or_insert_with(&key, || {
                runs.set(runs.get() + 1);
                Ok(b"fresh".to_vec())
            })
            .unwrap();
        assert_eq!((&*bytes, hit), (&b"fresh"[..], None));
    }
    assert_eq!(runs.get(), 2);
    assert_eq!(disabled.stats(), CacheStats { misses: 3, ..CacheStats::default() });
}

#[test]
fn files_outlive_the_cache_that_wrote_them() {
    let dir = TempDir::new();
    let key = CacheKey::new(&[b"disk"]);
    let payload: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let writer = CompileCache::at(&dir.0);
    assert_eq!(writer.dir(), Some(dir.0.as_path()));
    let (_, hit) = writer.get_or_insert_with(&key, || Ok(payload.clone())).unwrap();
    assert_eq!(hit, None);
    assert_eq!(names(&dir.0), [format!("{key}.bin")], "one file and no temporaries");
    let file = std::fs::read(dir.0.join(format!("{key}.bin"))).unwrap();
    assert_eq!(file.len(), 60 + payload.len());
    assert_eq!(&file[..8], b"CUKCACHE");

    // A new cache on the same directory stands for a later process.
    let reader = CompileCache::at(&dir.0);
    let (bytes, hit) = reader.get(&key).unwrap();
    assert_eq!((&*bytes, hit), (&payload[..], CacheHit::Disk));
    assert_eq!(reader.get(&key).unwrap().1, CacheHit::Memory);
    reader.clear_memory();
    let (bytes, hit) = reader.get_or_insert_with(&key, || panic!("on disk")).unwrap();
    assert_eq!((&*bytes, hit), (&payload[..], Some(CacheHit::Disk)));
    let stats = reader.stats();
    assert_eq!((stats.memory_hits, stats.disk_hits, stats.misses, stats.rejected), (1, 2, 0, 0));
}

/// A cache keeps the directory it opened: one moved away is still the one used, whatever is
/// put at the path later.
#[cfg(unix)]
#[test]
fn a_cache_keeps_the_directory_it_opened() {
    let dir = TempDir::new();
    let moved = TempDir(PathBuf::from(format!("{}-moved", dir.0.display())));
    let (first, second) = (CacheKey::new(&[b"first"]), CacheKey::new(&[b"second"]));
    let cache = CompileCache::at(&dir.0);
    cache.put(&first, b"first kernel");
    // The directory is moved away, and another one put at the path, holding a valid entry for
    // `second` (written by another cache).
    std::fs::rename(&dir.0, &moved.0).unwrap();
    CompileCache::at(&dir.0).put(&second, b"planted at the path");
    cache.clear_memory();
    let (bytes, hit) = cache.get(&first).unwrap();
    assert_eq!((&*bytes, hit), (&b"first kernel"[..], CacheHit::Disk), "read from the moved directory");
    assert_eq!(cache.get(&second), None, "a miss does not read what is at the path");
    cache.put(&second, b"second kernel");
    assert_eq!(names(&moved.0).len(), 2, "written where it was opened");
    cache.clear_memory();
    let (bytes, _) = cache.get(&second).unwrap();
    assert_eq!(&*bytes, b"second kernel", "not what is at the path now");
    assert_eq!(cache.stats().untrusted_dir, 0);
}

/// A directory opened to others while a cache holds it is refused at the next write or the
/// next lookup that finds nothing, and from then on, until it is private again. A lookup that
/// finds its entry before that reads it (the entry passes its own checks).
#[cfg(unix)]
#[test]
fn a_directory_opened_to_others_is_refused_from_the_next_write_or_miss() {
    use std::os::unix::fs::PermissionsExt;
    let chmod =
        |mode: u32, dir: &Path| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    let dir = TempDir::new();
    let (first, second) = (CacheKey::new(&[b"first"]), CacheKey::new(&[b"second"]));
    let cache = CompileCache::at(&dir.0);
    cache.put(&first, b"first kernel");
    chmod(0o777, &dir.0);
    cache.put(&second, b"second kernel");
    assert_eq!(names(&dir.0), [format!("{first}.bin")], "not written");
    cache.clear_memory();
    assert_eq!(cache.get(&first), None, "nor read");
    assert_eq!(cache.stats().untrusted_dir, 2);
    chmod(0o700, &dir.0);
    assert_eq!(cache.get(&first).map(|(_, hit)| hit), Some(CacheHit::Disk), "private again, used again");
    assert_eq!(cache.stats().untrusted_dir, 2);

    // The same from the reading side.
    chmod(0o777, &dir.0);
    cache.clear_memory();
    assert_eq!(cache.get(&first).map(|(_, hit)| hit), Some(CacheHit::Disk), "a hit, as last checked");
    assert_eq!(cache.get(&second), None, "a lookup that finds nothing checks the directory");
    assert_eq!(cache.stats().untrusted_dir, 3);
    cache.clear_memory();
    assert_eq!(cache.get(&first), None, "refused from then on");
    assert_eq!(cache.stats().untrusted_dir, 4);
    chmod(0o700, &dir.0);
}

/// A directory removed while a cache holds it is let go at the next miss or write: a read then
/// finds what another cache made at the path, and a write makes the directory again.
#[cfg(unix)]
#[test]
fn a_removed_directory_is_let_go_at_the_next_miss_or_write() {
    let dir = TempDir::new();
    let (first, second) = (CacheKey::new(&[b"first"]), CacheKey::new(&[b"second"]));
    let cache = CompileCache::at(&dir.0);
    cache.put(&first, b"first kernel");
    std::fs::remove_dir_all(&dir.0).unwrap();
    CompileCache::at(&dir.0).put(&second, b"second kernel");
    let (bytes, hit) = cache.get(&second).unwrap();
    assert_eq!((&*bytes, hit), (&b"second kernel"[..], CacheHit::Disk), "read from the new directory");

    std::fs::remove_dir_all(&dir.0).unwrap();
    cache.clear_memory();
    let (_, hit) = cache.get_or_insert_with(&first, || Ok(b"compiled again".to_vec())).unwrap();
    assert_eq!(hit, None);
    assert_eq!(names(&dir.0), [format!("{first}.bin")], "the directory is made again, with the entry");
    cache.clear_memory();
    let (bytes, hit) = cache.get(&first).unwrap();
    assert_eq!((&*bytes, hit), (&b"compiled again"[..], CacheHit::Disk));
    let stats = cache.stats();
    assert_eq!((stats.failed_writes, stats.rejected, stats.untrusted_dir), (0, 0, 0));
}

#[test]
fn a_directory_that_cannot_be_written_leaves_entries_in_memory() {
    let dir = TempDir::new();
    std::fs::create_dir_all(&dir.0).unwrap();
    let blocker = dir.0.join("a-file");
    std::fs::write(&blocker, b"not a directory").unwrap();
    let cache = CompileCache::at(blocker.join("kernels"));
    let key = CacheKey::new(&[b"unwritable"]);
    let (bytes, hit) = cache.get_or_insert_with(&key, || Ok(b"cubin".to_vec())).unwrap();
    assert_eq!((&*bytes, hit), (&b"cubin"[..], None));
    assert_eq!(cache.get(&key).map(|(_, hit)| hit), Some(CacheHit::Memory));
    let stats = cache.stats();
    assert_eq!((stats.writes, stats.failed_writes, stats.rejected), (1, 1, 0));
}

#[test]
fn threads_write_one_key_while_others_read_it() {
    let temp = TempDir::new();
    let dir = temp.0.as_path();
    let done = AtomicBool::new(false);
    let expected = payload(0);
    thread::scope(|s| {
        let readers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let cache = CompileCache::at(dir);
                    let mut seen = 0;
                    while !done.load(Ordering::Acquire) {
                        cache.clear_memory();
                        if let Some((bytes, hit)) = cache.get(&key(0)) {
                            assert_eq!(hit, CacheHit::Disk);
                            assert!(*bytes == expected, "a reader saw a partial or foreign entry");
                            seen += 1;
                        }
                    }
                    assert_eq!(cache.stats().rejected, 0, "a reader found a damaged file");
                    seen
                })
            })
            .collect();
        let writers: Vec<_> = (0..8)
            .map(|w| {
                let expected = &expected;
                s.spawn(move || {
                    let cache = CompileCache::at(dir);
                    for _ in 0..10 {
                        cache.put(&key(0), expected);
                        cache.put(&key(1 + w), &payload(1 + w));
                    }
                    let stats = cache.stats();
                    assert_eq!((stats.writes, stats.failed_writes), (20, 0));
                })
            })
            .collect();
        // The readers stop even when a writer failed, so that the scope ends.
        let written: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        done.store(true, Ordering::Release);
        let seen: Vec<_> = readers.into_iter().map(|r| r.join()).collect();
        assert!(written.iter().all(Result::is_ok), "a writer failed");
        assert!(seen.iter().all(Result::is_ok), "a reader failed");
        assert!(seen.into_iter().map(Result::unwrap).sum::<usize>() > 0, "the readers never saw the entry");
    });
    assert_valid(dir, 9);
}

/// What each process does: compiles (or finds) every key, then writes every key again.
fn fill(dir: &Path) {
    let cache = CompileCache::at(dir);
    for round in 0..3 {
        for i in 0..KEYS {
            cache.clear_memory();
            let (bytes, _) = cache.get_or_insert_with(&key(i), || Ok(payload(i))).unwrap();
            assert!(*bytes == payload(i), "round {round}, key {i}");
            cache.put(&key(i), &payload(i));
        }
    }
    let stats = cache.stats();
    assert_eq!((stats.rejected, stats.failed_writes), (0, 0), "{stats:?}");
}

#[test]
fn processes_fill_one_directory_at_once() {
    if let Some(dir) = std::env::var_os(WRITER_DIR) {
        fill(Path::new(&dir));
        return;
    }
    let dir = TempDir::new();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["processes_fill_one_directory_at_once", "--exact", "--test-threads=1"])
                .env(WRITER_DIR, &dir.0)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    fill(&dir.0);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("1 passed"), "the child ran no test: {stdout}");
    }
    assert_valid(&dir.0, KEYS);
}
