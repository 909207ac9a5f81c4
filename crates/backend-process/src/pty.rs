//! Pseudo-terminals for sessions started with a PTY: the supervisor opens
//! the pair, hands the slave to the session's shim as its stdin, stdout and
//! stderr (the shim's child makes it its controlling terminal) and keeps the
//! master, non-blocking, to read output, write input and set the size.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::pty::{openpty, Winsize};
use stasis_core::PtySize;
use tokio::io::unix::AsyncFd;

fn winsize(size: PtySize) -> Winsize {
    Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

fn set_flag(fd: &OwnedFd, get: i32, set: i32, flag: i32) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor we own.
    let cur = unsafe { libc::fcntl(fd.as_raw_fd(), get) };
    if cur < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), set, cur | flag) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A new terminal of `size`: (master, slave), both close-on-exec (the
/// slave reaches the shim through its stdio, which `Command` dups).
pub(crate) fn open(size: PtySize) -> io::Result<(OwnedFd, OwnedFd)> {
    let p = openpty(Some(&winsize(size)), None).map_err(io::Error::from)?;
    for fd in [&p.master, &p.slave] {
        set_flag(fd, libc::F_GETFD, libc::F_SETFD, libc::FD_CLOEXEC)?;
    }
    Ok((p.master, p.slave))
}

/// The master side, registered with the runtime.
pub(crate) struct Master(AsyncFd<OwnedFd>);

impl Master {
    pub(crate) fn new(fd: OwnedFd) -> io::Result<Self> {
        set_flag(&fd, libc::F_GETFL, libc::F_SETFL, libc::O_NONBLOCK)?;
        // SAFETY: `fd` is owned by the AsyncFd and neither replaced nor
        // closed while registered.
        Ok(Self(unsafe { AsyncFd::register(fd)? }))
    }

    /// Output; `Ok(0)` once every holder of the slave closed it (the
    /// kernel reports that as EIO on the master).
    pub(crate) async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut g = self.0.readable().await?;
            let r = g.try_io(|fd| {
                // SAFETY: reading into a buffer we own from a descriptor we own.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Input, all of it (waits while the terminal's input queue is full).
    pub(crate) async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut g = self.0.writable().await?;
            let r = g.try_io(|fd| {
                // SAFETY: writing from a buffer we own to a descriptor we own.
                let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Set the terminal size; the kernel sends SIGWINCH to the terminal's
    /// foreground process group.
    pub(crate) fn resize(&self, size: PtySize) -> io::Result<()> {
        let ws = winsize(size);
        // SAFETY: TIOCSWINSZ reads one winsize from a valid pointer.
        if unsafe { libc::ioctl(self.0.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size_of(fd: &OwnedFd) -> (u16, u16) {
        let mut ws = winsize(PtySize { cols: 0, rows: 0 });
        // SAFETY: TIOCGWINSZ writes one winsize to a valid pointer.
        assert_eq!(
            unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
            0
        );
        (ws.ws_col, ws.ws_row)
    }

    #[tokio::test]
    async fn master_echoes_input_resizes_and_sees_hangup() {
        let (m, s) = open(PtySize { cols: 80, rows: 24 }).unwrap();
        assert_eq!(size_of(&s), (80, 24));
        let m = Master::new(m).unwrap();
        m.resize(PtySize {
            cols: 132,
            rows: 50,
        })
        .unwrap();
        assert_eq!(size_of(&s), (132, 50));
        // The line discipline echoes what is typed.
        m.write_all(b"hi\n").await.unwrap();
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        while !got.ends_with(b"\r\n") {
            let n = m.read(&mut buf).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"hi\r\n");
        drop(s);
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), m.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 0, "closing the last slave reads as end of output");
    }
}
