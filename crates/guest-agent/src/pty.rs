//! Pseudo-terminals for sessions started with a PTY: open a pair of the
//! requested size, make the slave the child's controlling terminal, set the
//! size later on the master.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use stasis_core::PtySize;

/// `TERM` of a session with a PTY unless its environment sets one.
pub const TERM: &str = "xterm-256color";

fn winsize(size: PtySize) -> libc::winsize {
    libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A new terminal of `size`: (master, slave), both close-on-exec (the
/// slave reaches the child through its stdio, which `Command` dups).
pub fn open(size: PtySize) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r/open on a descriptor
    // we own and a buffer of the given length.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if m < 0 {
            return Err(io::Error::last_os_error());
        }
        let master = OwnedFd::from_raw_fd(m);
        if libc::grantpt(m) < 0 || libc::unlockpt(m) < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut name = [0 as libc::c_char; 128];
        let r = libc::ptsname_r(m, name.as_mut_ptr(), name.len());
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
        let s = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        let slave = OwnedFd::from_raw_fd(s);
        resize(&master, size)?;
        Ok((master, slave))
    }
}

/// In the child, after the `setsid` that [`crate::exec::command`] does:
/// take stdin (the slave) as the controlling terminal, and let the
/// terminal's signals act: the agent may have been started with SIGINT and
/// SIGQUIT ignored (as a background job of a script), which a shell would
/// pass on to every job, so Ctrl-C would do nothing.
pub fn make_controlling(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls (ioctl, signal) run in the
    // forked child.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            for sig in [
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGTSTP,
                libc::SIGTTIN,
                libc::SIGTTOU,
            ] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

/// Set the terminal size; the kernel sends SIGWINCH to the terminal's
/// foreground process group.
pub fn resize(master: &OwnedFd, size: PtySize) -> io::Result<()> {
    let ws = winsize(size);
    // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slave_has_the_size_set_on_the_master() {
        let (m, s) = open(PtySize { cols: 90, rows: 33 }).unwrap();
        let get = || {
            let mut ws = winsize(PtySize { cols: 0, rows: 0 });
            // SAFETY: TIOCGWINSZ writes one winsize to a valid pointer.
            assert_eq!(
                unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
                0
            );
            (ws.ws_col, ws.ws_row)
        };
        assert_eq!(get(), (90, 33));
        resize(
            &m,
            PtySize {
                cols: 200,
                rows: 60,
            },
        )
        .unwrap();
        assert_eq!(get(), (200, 60));
    }
}
