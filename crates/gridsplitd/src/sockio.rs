//! Plain socket I/O shared by both sides of the relay: the LAN legs (flow/) and the
//! WAN driver (transfer/tcp.rs) write segment lists and read into buffers the same
//! way, so these live below both rather than in one driver.

use std::io::{self, IoSlice};

use bytes::{Buf, Bytes};
use tokio::net::TcpStream;

/// iovecs per writev (IOV_MAX is 1024; beyond ~64 the gain is nil).
const MAX_IOV: usize = 64;

/// Writes what the socket takes now from the front of `segs`, removing it.
/// Ok(true) when everything was written, Ok(false) when the socket is full.
pub(crate) fn try_write_segments(stream: &TcpStream, segs: &mut Vec<Bytes>) -> io::Result<bool> {
    let mut first = 0;
    let res = loop {
        if first == segs.len() {
            break Ok(true);
        }
        // On the stack: a relayed message is often one or two segments, and a
        // heap allocation per write is measurable on the latency path.
        let mut iov = [IoSlice::new(&[]); MAX_IOV];
        let cnt = (segs.len() - first).min(MAX_IOV);
        for (d, s) in iov.iter_mut().zip(&segs[first..first + cnt]) {
            *d = IoSlice::new(s);
        }
        let res = if cnt == 1 {
            stream.try_write(&segs[first])
        } else {
            stream.try_write_vectored(&iov[..cnt])
        };
        match res {
            Ok(0) => break Err(io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                while first < segs.len() && n >= segs[first].len() {
                    n -= segs[first].len();
                    first += 1;
                }
                if n > 0 {
                    segs[first].advance(n);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(false),
            Err(e) => break Err(e),
        }
    };
    segs.drain(..first);
    res
}

/// Writes all of `segs` to the socket, waiting for room; on error what was not
/// written stays in `segs`. (LAN sockets, and WAN lanes without keys.)
pub(crate) async fn write_all_segments(
    stream: &TcpStream,
    segs: &mut Vec<Bytes>,
) -> io::Result<()> {
    while !try_write_segments(stream, segs)? {
        stream.writable().await?;
    }
    Ok(())
}

/// Reads what the socket holds into `buf`, like tokio's `try_read_buf`, with one
/// difference: a short read (fewer bytes than asked for) tells tokio the socket is
/// drained. TCP's recvmsg only returns short once its receive queue (and backlog)
/// is empty, and any byte arriving later raises a new epoll event, so the read
/// that would only have returned EAGAIN is skipped — one syscall less per message
/// on every socket of a relay (a ping-pong's message is always a short read).
/// The readiness is captured before the read and cleared only if no event came
/// in since, so an arrival racing with the read is never lost.
pub(crate) fn try_read_drain(
    stream: &TcpStream,
    buf: &mut impl bytes::BufMut,
) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let mut got = None;
    let res = stream.try_io(tokio::io::Interest::READABLE, || {
        let dst = buf.chunk_mut();
        let want = dst.len();
        // SAFETY: `dst` is writable memory of `want` bytes owned by `buf`; the
        // kernel writes at most `want` bytes, and we advance `buf` by what it wrote.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                dst.as_mut_ptr() as *mut libc::c_void,
                want,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        // SAFETY: the kernel initialised the first `n` bytes of `dst`.
        unsafe { buf.advance_mut(n) };
        got = Some(n);
        if n > 0 && n < want {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match (res, got) {
        (_, Some(n)) => Ok(n),
        (Err(e), None) => Err(e),
        (Ok(n), None) => Ok(n),
    }
}
