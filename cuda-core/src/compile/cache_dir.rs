//! The compile cache's directory, and who may have changed what is in it.
//!
//! What the files hold is loaded and run on the GPU, and anyone who can write the directory can
//! plant an entry (a file's header is no signature). So on Unix the directory is used only if
//! nobody but the effective user can change it: owned by that user, writable by neither group
//! nor others. It is opened once and kept open, and entries are opened, created, renamed and
//! removed relative to the directory that was checked, so a lookup walks one name, and a
//! directory moved in at the path later is not the one used.
//!
//! The open directory is checked again (one `fstat`, no walk of its path) before every write
//! and after every read that finds nothing; a directory then found removed, or open to others,
//! is let go, and the path is opened and checked again, as it is for a look under another
//! effective user. A read that finds its entry relies on the last check of the directory and
//! on the checks of the entry itself: a file of that user, with one link, that group and others
//! cannot write, whose header names the key looked up. So a directory opened to others while a
//! cache holds it is refused at its next write or miss, and until then what another user adds
//! is refused: a file they make is theirs, a hard link they make to a file of the user has two
//! links, and an entry of the user renamed to another key's name names its own key. What the
//! checks cannot tell is a file of the user that another user moves in from a directory of
//! theirs (one without the sticky bit) after filling it as an entry: keep the directory private.
//!
//! Entries are opened without following a link and without waiting on a pipe, and checked on
//! the opened file: a regular file of that owner with one link, not writable by group or
//! others, at most 1 GiB. They are written to a temporary file of a unique name, synced and
//! renamed over the entry's name, mode 0600, so readers in any process see the old file, the
//! new one or none.
//!
//! Off Unix the cache makes no ownership check, and entries are opened by their paths.

use std::ffi::{CStr, CString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
#[cfg(not(unix))]
use std::io::{IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

/// The largest file read back (1 GiB): no compiled kernel comes near it.
pub(super) const MAX_FILE_BYTES: u64 = 1 << 30;

/// A cache directory by its path, and the directory as last opened and checked.
pub(super) struct CacheDir {
    path: PathBuf,
    /// `None` until the directory exists and was found private, and again once it was found
    /// removed or open to others, or looked at under another effective user.
    held: Mutex<Option<Arc<OpenDir>>>,
}

/// How a look treats the directory it holds.
#[derive(Clone, Copy)]
pub(super) enum Check {
    /// As last checked: for reading an entry, which is checked itself.
    Held,
    /// Checked now: before a write, and after a read that found nothing.
    Now,
}

/// What a look at the directory found.
pub(super) enum Look {
    /// The directory, private to the effective user.
    Open(Arc<OpenDir>),
    /// No directory at the path (not made yet, or something else is there).
    Missing,
    /// A directory another user can change: left alone.
    Untrusted,
}

impl CacheDir {
    pub(super) fn new(path: PathBuf) -> CacheDir {
        CacheDir { path, held: Mutex::new(None) }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory for this process's effective user: the one held if it was opened for the
    /// same user and (with [`Check::Now`]) is still there and private, else the path opened and
    /// checked now (and held if private).
    pub(super) fn look(&self, check: Check) -> Look {
        let user = User::effective();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = held.as_ref().filter(|dir| dir.user == user) {
            if matches!(check, Check::Held) || matches!(dir.state(), State::Private) {
                return Look::Open(dir.clone());
            }
        }
        *held = None;
        match OpenDir::open(&self.path, user) {
            Ok(Some(dir)) => {
                let dir = Arc::new(dir);
                *held = Some(dir.clone());
                Look::Open(dir)
            }
            Ok(None) => Look::Untrusted,
            Err(_) => Look::Missing,
        }
    }

    /// Lets go of `dir` if it is the one held: for a directory found gone by a failed write
    /// (where its link count did not say so).
    pub(super) fn forget(&self, dir: &Arc<OpenDir>) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.as_ref().is_some_and(|h| Arc::ptr_eq(h, dir)) {
            *held = None;
        }
    }

    /// Creates the directory and its missing parents; on Unix the directories made are
    /// readable and writable by their owner only, since what the cache holds is run on the GPU.
    pub(super) fn create(&self) -> io::Result<()> {
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&self.path)
    }
}

/// A cache directory opened, and found private to `user` when it was.
pub(super) struct OpenDir {
    #[cfg(unix)]
    dir: File,
    #[cfg(not(unix))]
    path: PathBuf,
    user: User,
}

/// What an open directory is now.
enum State {
    /// Nobody but its user can change what is in it.
    Private,
    /// Another user can.
    Shared,
    /// Removed, or no longer to be read.
    Gone,
}

impl OpenDir {
    /// The directory at `path` if nobody but `user` can change what is in it, `None` if
    /// another user can; an error if there is no directory there. On Linux it is opened as a
    /// path (`O_PATH`), which needs no permission on the directory itself, so that a private
    /// directory its user cannot list is used, and another user's is checked (and refused).
    #[cfg(unix)]
    fn open(path: &Path, user: User) -> io::Result<Option<OpenDir>> {
        use std::os::unix::fs::OpenOptionsExt;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        const AS_PATH: libc::c_int = libc::O_PATH;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        const AS_PATH: libc::c_int = 0;
        let dir = OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | AS_PATH).open(path)?;
        let open = OpenDir { dir, user };
        match open.state() {
            State::Private => Ok(Some(open)),
            State::Shared => Ok(None),
            State::Gone => Err(io::ErrorKind::NotFound.into()),
        }
    }

    #[cfg(not(unix))]
    fn open(path: &Path, user: User) -> io::Result<Option<OpenDir>> {
        let open = OpenDir { path: path.to_path_buf(), user };
        match open.state() {
            State::Gone => Err(io::ErrorKind::NotFound.into()),
            State::Private | State::Shared => Ok(Some(open)),
        }
    }

    /// The directory's state now, read from the open directory (on Unix; elsewhere from its
    /// path): removed once its link count is 0.
    fn state(&self) -> State {
        #[cfg(unix)]
        let stat = Stat::of(&self.dir);
        #[cfg(not(unix))]
        let stat = fs::metadata(&self.path).map(Stat::from);
        match stat {
            Ok(stat) if !stat.dir || stat.links == 0 => State::Gone,
            Ok(stat) if self.user.alone_can_change(&stat) => State::Private,
            Ok(_) => State::Shared,
            Err(_) => State::Gone,
        }
    }

    /// Reads the entry `name`: its first `head.len()` bytes into `head`, the rest into the
    /// result. `None` for a file that is not a regular file with one link, of at most
    /// [`MAX_FILE_BYTES`], that only the directory's user can change (a second link is another
    /// name for the file, which may be in a directory others can write), or that is shorter
    /// than `head`, or that read back shorter than the size it was checked at, or longer when
    /// the read says so. The checks are made on the opened file, so a file swapped in after
    /// them is not the one read. The read asks for one byte more than the checked size: a whole
    /// file takes one read, and a spare byte read tells a file that grew. What was read is
    /// checked against the header's length and checksum in any case.
    pub(super) fn read(&self, name: &CStr, head: &mut [u8]) -> io::Result<Option<Arc<[u8]>>> {
        let file = self.open_entry(name)?;
        let stat = Stat::of(&file)?;
        let private = stat.file && stat.links <= 1 && self.user.alone_can_change(&stat);
        if !private || stat.len > MAX_FILE_BYTES {
            return Ok(None);
        }
        let Some(len) = usize::try_from(stat.len).ok().filter(|&len| len >= head.len()) else {
            return Ok(None);
        };
        // Read straight into the storage the entry is shared from: no copy after the read.
        let mut rest = Arc::<[u8]>::new_uninit_slice(len - head.len());
        let Some(rest_bytes) = Arc::get_mut(&mut rest) else { return Ok(None) };
        let filled = read_parts(&file, head, rest_bytes)?;
        // SAFETY: `len` bytes read in order fill `head` and then every byte of `rest`.
        Ok((filled == len).then(|| unsafe { rest.assume_init() }))
    }

    /// Writes `parts`, in order, as the entry `name`, through a temporary file and a rename.
    pub(super) fn write(&self, name: &CStr, parts: &[&[u8]]) -> io::Result<()> {
        static TEMPORARIES: AtomicU64 = AtomicU64::new(0);
        let mut attempts = 0;
        let (file, temporary) = loop {
            let n = TEMPORARIES.fetch_add(1, Relaxed);
            let temporary = format!(".{}.{}.{n}.tmp", name.to_string_lossy(), std::process::id());
            let temporary = CString::new(temporary).map_err(|_| io::ErrorKind::InvalidInput)?;
            match self.create_entry(&temporary) {
                Ok(file) => break (file, temporary),
                // Left by a crashed process that had this id: try the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 8 => attempts += 1,
                Err(e) => return Err(e),
            }
        };
        let result = (|| {
            let mut file = file;
            parts.iter().try_for_each(|part| file.write_all(part))?;
            file.sync_all()?;
            drop(file);
            self.rename(&temporary, name)
        })();
        if result.is_err() {
            let _ = self.remove(&temporary);
        }
        result
    }
}

/// Reads `file` into `head`, then `rest`, then one spare byte, until `head` and `rest` are full
/// or the file ends; returns the count read, one more than both hold for a file that grew.
/// On Unix `rest` is read into as it is (`readv`), with no zero fill first.
#[cfg(unix)]
fn read_parts(file: &File, head: &mut [u8], rest: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let (head_len, rest_len) = (head.len(), rest.len());
    let want = head_len + rest_len;
    let mut spare = [0u8; 1];
    let parts =
        [(head.as_mut_ptr(), head_len), (rest.as_mut_ptr().cast::<u8>(), rest_len), (spare.as_mut_ptr(), 1)];
    let mut filled = 0;
    while filled < want {
        // The parts from byte `filled` on.
        let mut skip = filled;
        let mut unfilled = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 3];
        let mut count = 0;
        for (base, len) in parts {
            if skip >= len {
                skip -= len;
                continue;
            }
            // SAFETY: `skip < len`, so the pointer stays inside the part.
            unfilled[count] = libc::iovec { iov_base: unsafe { base.add(skip) }.cast(), iov_len: len - skip };
            skip = 0;
            count += 1;
        }
        // SAFETY: the first `count` entries point at writable bytes of `head`, `rest` and
        // `spare`, borrowed mutably for the call; `readv` only writes them.
        let read = unsafe { libc::readv(file.as_raw_fd(), unfilled.as_ptr(), count as libc::c_int) };
        match usize::try_from(read) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(_) => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
        }
    }
    Ok(filled)
}

#[cfg(not(unix))]
fn read_parts(mut file: &File, head: &mut [u8], rest: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    rest.fill(MaybeUninit::new(0));
    // SAFETY: every byte of `rest` was just written, and `u8` has the layout of `MaybeUninit<u8>`.
    let rest = unsafe { &mut *(rest as *mut [MaybeUninit<u8>] as *mut [u8]) };
    let want = head.len() + rest.len();
    let mut spare = [0u8; 1];
    let mut buffers = [IoSliceMut::new(head), IoSliceMut::new(rest), IoSliceMut::new(&mut spare)];
    let mut unfilled = &mut buffers[..];
    let mut filled = 0;
    while filled < want {
        match file.read_vectored(unfilled) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                IoSliceMut::advance_slices(&mut unfilled, n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Whether opening an entry failed because of what is there, so that it is to be refused and
/// removed: a link (`ELOOP`, from `O_NOFOLLOW`) or a socket (`ENXIO`). Other failures (no
/// descriptor left, no memory, no permission) leave the entry for a later look.
pub(super) fn refused(error: &io::Error) -> bool {
    #[cfg(unix)]
    return matches!(error.raw_os_error(), Some(libc::ELOOP | libc::ENXIO));
    #[cfg(not(unix))]
    {
        let _ = error;
        false
    }
}

/// What the checks read of an open file or directory.
struct Stat {
    dir: bool,
    file: bool,
    /// The number of links (on Unix; elsewhere 1).
    links: u64,
    len: u64,
    #[cfg(unix)]
    uid: u32,
    #[cfg(unix)]
    mode: u32,
}

impl Stat {
    /// One `fstat` of the open `file`: cheaper than `File::metadata`'s `statx`, which also
    /// reads times the checks do not use.
    #[cfg(unix)]
    fn of(file: &File) -> io::Result<Stat> {
        use std::os::fd::AsRawFd;
        let mut stat = MaybeUninit::<libc::stat>::uninit();
        // SAFETY: an open descriptor and room for one `stat`, alive across the call.
        if unsafe { libc::fstat(file.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fstat` returned 0, so it filled `stat`.
        let stat = unsafe { stat.assume_init() };
        let kind = stat.st_mode & libc::S_IFMT;
        #[allow(clippy::unnecessary_cast, reason = "`nlink_t` and `mode_t` are narrower on some systems")]
        Ok(Stat {
            dir: kind == libc::S_IFDIR,
            file: kind == libc::S_IFREG,
            links: stat.st_nlink as u64,
            len: u64::try_from(stat.st_size).unwrap_or(u64::MAX),
            uid: stat.st_uid,
            mode: stat.st_mode as u32,
        })
    }

    #[cfg(not(unix))]
    fn of(file: &File) -> io::Result<Stat> {
        file.metadata().map(Stat::from)
    }
}

#[cfg(not(unix))]
impl From<fs::Metadata> for Stat {
    fn from(meta: fs::Metadata) -> Stat {
        Stat { dir: meta.is_dir(), file: meta.is_file(), links: 1, len: meta.len() }
    }
}

#[cfg(unix)]
impl OpenDir {
    /// `openat` of `name` in this directory with `flags` (and close-on-exec), as a file.
    fn open_at(&self, name: &CStr, flags: libc::c_int, mode: libc::c_uint) -> io::Result<File> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        loop {
            // SAFETY: an open directory descriptor and a NUL-terminated name, both alive across
            // the call; `mode` is read only with O_CREAT.
            let fd =
                unsafe { libc::openat(self.dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
            if fd >= 0 {
                // SAFETY: `fd` was just opened, and nothing else owns it.
                return Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// The entry `name` opened for reading: a link is not followed (the open fails), and a pipe
    /// or device does not block the open.
    fn open_entry(&self, name: &CStr) -> io::Result<File> {
        self.open_at(name, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0)
    }

    /// A new file `name`, its owner's alone (mode 0600); fails if anything is there, a link
    /// included.
    fn create_entry(&self, name: &CStr) -> io::Result<File> {
        self.open_at(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)
    }

    fn rename(&self, from: &CStr, to: &CStr) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let fd = self.dir.as_raw_fd();
        // SAFETY: an open directory descriptor and two NUL-terminated names, alive across the call.
        if unsafe { libc::renameat(fd, from.as_ptr(), fd, to.as_ptr()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Removes the entry `name` (a link itself, not what it points to).
    pub(super) fn remove(&self, name: &CStr) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: an open directory descriptor and a NUL-terminated name, alive across the call.
        if unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(not(unix))]
impl OpenDir {
    fn entry_path(&self, name: &CStr) -> PathBuf {
        self.path.join(&*name.to_string_lossy())
    }

    fn open_entry(&self, name: &CStr) -> io::Result<File> {
        File::open(self.entry_path(name))
    }

    fn create_entry(&self, name: &CStr) -> io::Result<File> {
        OpenOptions::new().write(true).create_new(true).open(self.entry_path(name))
    }

    fn rename(&self, from: &CStr, to: &CStr) -> io::Result<()> {
        fs::rename(self.entry_path(from), self.entry_path(to))
    }

    pub(super) fn remove(&self, name: &CStr) -> io::Result<()> {
        fs::remove_file(self.entry_path(name))
    }
}

/// This process's effective user, read at each look at the cache (on Unix; elsewhere the
/// cache makes no such check).
#[derive(Clone, Copy, PartialEq, Eq)]
struct User {
    #[cfg(unix)]
    uid: u32,
}

impl User {
    fn effective() -> User {
        User {
            // SAFETY: geteuid takes nothing, cannot fail and touches no memory of ours.
            #[cfg(unix)]
            uid: unsafe { libc::geteuid() },
        }
    }

    /// Whether nobody but this user can change the file or directory of `stat`: owned by the
    /// user, writable by neither group nor others. Always true off Unix.
    fn alone_can_change(self, stat: &Stat) -> bool {
        #[cfg(unix)]
        return stat.uid == self.uid && stat.mode & 0o022 == 0;
        #[cfg(not(unix))]
        {
            let _ = stat;
            true
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    /// A socket read in pieces as they are sent: each `readv` returns what has come so far.
    fn read_in_pieces(pieces: &[&[u8]], head_len: usize, rest_len: usize) -> io::Result<(usize, Vec<u8>)> {
        let (reader, mut writer) = UnixStream::pair()?;
        let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
        let sender = std::thread::spawn(move || -> io::Result<()> {
            for piece in pieces {
                writer.write_all(&piece)?;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(())
        });
        let file = File::from(OwnedFd::from(reader));
        let mut head = vec![0; head_len];
        let mut rest = vec![MaybeUninit::new(7u8); rest_len];
        let filled = read_parts(&file, &mut head, &mut rest)?;
        sender.join().map_err(|_| io::Error::other("the sender panicked"))??;
        // SAFETY: the bytes were initialised (to 7) before the read.
        head.extend(rest.iter().map(|b| unsafe { b.assume_init() }));
        Ok((filled, head))
    }

    #[test]
    fn reads_that_come_in_pieces_fill_the_head_then_the_rest() {
        let (filled, bytes) = read_in_pieces(&[b"ab", b"cdef", b"ghij"], 3, 7).expect("read");
        assert_eq!((filled, &bytes[..]), (10, &b"abcdefghij"[..]));
        let (filled, bytes) = read_in_pieces(&[b"abc", b"de"], 3, 7).expect("read");
        assert_eq!((filled, &bytes[..]), (5, &b"abcde\x07\x07\x07\x07\x07"[..]), "the file ended early");
        let (filled, bytes) = read_in_pieces(&[b"abc"], 3, 0).expect("read");
        assert_eq!((filled, &bytes[..]), (3, &b"abc"[..]), "an entry with no payload");
        let (filled, _) = read_in_pieces(&[b"abcdefghijk"], 3, 7).expect("read");
        assert_eq!(filled, 11, "the spare byte tells a file that grew");
    }
}
