//! The ledger's files on disk, apart from what SQLite writes: the lock file that keeps one
//! ledger to one process, and the owner-only, no-symlink way secrets are read and created.
//!
//! Contracts:
//! - [`LockFile::acquire`] takes an exclusive advisory `flock` on `<ledger>.lock` without
//!   waiting and then writes the holder's pid into it; the lock lasts as long as the value
//!   (and the kernel drops it with the process, however it ends). The file itself stays
//!   (removing it would let two processes lock two different files of one name).
//! - Every file created here is created with mode 0600, never through a symbolic link
//!   (`O_NOFOLLOW`, or `O_EXCL`, which does not follow one either).
//! - Reads are bounded ([`SECRET_MAX_BYTES`]). Nothing here deletes a file it did not create.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
#[cfg(feature = "sqlite")]
use std::io::{Read as _, Seek as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Most bytes read from a key or token file (its first line is 64 hex digits).
pub(crate) const SECRET_MAX_BYTES: u64 = 4096;

/// Owner read and write only.
const OWNER_ONLY: u32 = 0o600;

/// Options opening `path` itself, never a symbolic link's target (`ELOOP` instead), and
/// creating files owner-only.
fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(OWNER_ONLY).custom_flags(libc::O_NOFOLLOW);
    o
}

/// The error of opening a symbolic link with `O_NOFOLLOW`.
pub(crate) fn is_symlink(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

/// Open `path` for reading, refusing a symbolic link ([`is_symlink`]).
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<File> {
    options().read(true).open(path)
}

/// Create `path`, which must not exist, owner-only.
pub(crate) fn create_private(path: &Path) -> std::io::Result<File> {
    options().write(true).create_new(true).open(path)
}

/// `path` with `suffix` appended to its file name (`l.db` → `l.db.lock`).
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The permission bits of an open file, and whether group or others may read or write it.
pub(crate) fn mode_of(f: &File) -> std::io::Result<(u32, bool)> {
    let mode = std::os::unix::fs::PermissionsExt::mode(&f.metadata()?.permissions()) & 0o7777;
    Ok((mode, mode & 0o077 != 0))
}

/// Write `text` to a new owner-only file under a random temporary name beside `path`, then
/// link it into place: a crash leaves either no file at `path` or a whole one, and of two
/// processes creating it at once the second gets `AlreadyExists` (and reads the first one's).
/// A symbolic link at `path` is never followed (`link` does not follow its target name).
pub(crate) fn create_whole(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = beside(path, &format!(".tmp-{}", super::codec::hex(&crate::rng::bytes::<8>())));
    let written = create_private(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()));
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    linked?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Why the lock could not be taken.
#[cfg(feature = "sqlite")]
#[derive(Debug)]
pub(crate) enum LockError {
    /// Another process (or another open of this ledger in this one) holds it.
    Held {
        /// The pid the holder wrote, when it could be read.
        holder_pid: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    Io(std::io::Error),
}

/// The held lock of a ledger (see the module doc). Dropping it releases the lock.
#[cfg(feature = "sqlite")]
#[derive(Debug)]
pub(crate) struct LockFile {
    /// The locked file: the `flock` belongs to this open file description.
    _file: File,
}

#[cfg(feature = "sqlite")]
impl LockFile {
    /// Lock `path` (created owner-only if missing) without waiting, and write this process's
    /// pid into it.
    ///
    /// # Errors
    /// [`LockError::Held`] when it is locked already; [`LockError::Io`] otherwise (a
    /// symbolic link at `path` among them).
    pub(crate) fn acquire(path: &Path) -> Result<LockFile, LockError> {
        let mut file = options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(LockError::Io)?;
        // A lock this process released may stay held for a moment by a child another thread
        // is spawning: the child shares the descriptor from its fork until its exec closes it.
        // So a lock whose holder is this very process is tried again, for at most a second.
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut text = String::new();
                    let _ = file.rewind();
                    let _ = (&file).take(64).read_to_string(&mut text);
                    let holder_pid = text.trim().parse().ok();
                    tries += 1;
                    if holder_pid != Some(std::process::id()) || tries > 50 {
                        return Err(LockError::Held { holder_pid });
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
            }
        }
        // Only the holder writes: the pid a refused process reads is its holder's.
        let wrote = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        wrote.map_err(LockError::Io)?;
        Ok(LockFile { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_refuses_a_second_holder_naming_the_first_ones_pid_until_dropped() {
        let dir = mcp_devtools::TempDir::new("lock");
        let path = dir.path().join("l.db.lock");
        let first = LockFile::acquire(&path).unwrap();
        assert!(
            matches!(LockFile::acquire(&path), Err(LockError::Held { holder_pid: Some(p) }) if p == std::process::id())
        );
        let (mode, open) = mode_of(&File::open(&path).unwrap()).unwrap();
        assert_eq!((mode, open), (0o600, false));
        drop(first);
        assert!(LockFile::acquire(&path).is_ok(), "released with its holder");
    }

    #[test]
    fn a_file_created_whole_is_owner_only_and_never_replaces_a_symlink() {
        let dir = mcp_devtools::TempDir::new("whole");
        let path = dir.path().join("k");
        create_whole(&path, "secret\n").unwrap();
        assert_eq!(mode_of(&File::open(&path).unwrap()).unwrap(), (0o600, false));
        assert_eq!(
            create_whole(&path, "other\n").unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        let target = dir.path().join("target");
        std::fs::write(&target, "kept").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(is_symlink(&open_no_follow(&link).unwrap_err()));
        assert_eq!(
            create_whole(&link, "secret\n").unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "no temporary file is left: {left:?}");
    }
}
