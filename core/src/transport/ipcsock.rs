//! File descriptors passed between local processes over a Unix-domain datagram
//! socket with `SCM_RIGHTS`, as NCCL's `src/misc/ipcsocket.cc`
//! (`ncclIpcSocketInit`, `ncclIpcSocketSendFd`, `ncclIpcSocketRecvFd`): the
//! receiving process binds a socket in the abstract namespace (no file to
//! clean up; NCCL names its own `/tmp/nccl-socket-<rank>-<hash>` there too),
//! the sending process sends one descriptor to that name with a tag.
//!
//! The P2P transport uses it for cuMem FIFOs (`P2P/CUMEM`): the receiver
//! exports its FIFO as a POSIX file descriptor and sends it to the sender's
//! socket, named in the sender's connect information. Both ends are
//! non-blocking: connection setup polls them with its own deadline, so no
//! wait here is unbounded.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Bytes of the tag sent with each descriptor.
pub(crate) const TAG_BYTES: usize = 16;

/// Longest socket name (the abstract `sun_path` holds 107 bytes after its NUL).
pub(crate) const MAX_NAME: usize = 100;

/// A bound datagram socket that receives descriptors (NCCL's `ncclIpcSocket`).
#[derive(Debug)]
pub(crate) struct FdReceiver {
    sock: UnixDatagram,
    name: String,
}

impl FdReceiver {
    /// Binds a fresh abstract name `ferroccl-ipc-<pid>-<random>`, non-blocking.
    ///
    /// Errors: `socket` or `bind` failing.
    pub(crate) fn bind() -> io::Result<FdReceiver> {
        let name = format!(
            "ferroccl-ipc-{}-{:016x}",
            std::process::id(),
            crate::transport::shm::random_u64()
        );
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let sock = UnixDatagram::bind_addr(&addr)?;
        sock.set_nonblocking(true)?;
        Ok(FdReceiver { sock, name })
    }

    /// The abstract name peers send to.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// One descriptor and its tag, if one has arrived (`Ok(None)` otherwise).
    /// A datagram without exactly one descriptor, or with a tag of the wrong
    /// size, is an error (its descriptors are closed).
    ///
    /// Errors: `recvmsg` failing; a malformed datagram.
    pub(crate) fn try_recv(&self) -> io::Result<Option<(OwnedFd, [u8; TAG_BYTES])>> {
        let mut tag = [0u8; TAG_BYTES + 1];
        let mut iov = libc::iovec {
            iov_base: tag.as_mut_ptr().cast(),
            iov_len: tag.len(),
        };
        // Room for a few descriptors, so that a sender of too many is seen (and its extra closed).
        let mut cbuf = [0u64; 16];
        // SAFETY: a zeroed msghdr is a valid empty header; its fields are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: `msg` points at live buffers of the sizes it states.
        let n = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let mut fds = Vec::new();
        // SAFETY: walking the control messages the kernel wrote into `cbuf`.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<libc::c_int>();
                    let count =
                        ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<libc::c_int>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidData, m));
        if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
            return bad("a truncated descriptor message".into());
        }
        if fds.len() != 1 || n as usize != TAG_BYTES {
            return bad(format!(
                "a message of {n} bytes with {} descriptors, expected {TAG_BYTES} bytes with 1",
                fds.len()
            ));
        }
        let mut t = [0u8; TAG_BYTES];
        t.copy_from_slice(&tag[..TAG_BYTES]);
        Ok(fds.pop().map(|fd| (fd, t)))
    }
}

/// Sends `fd` with `tag` to the socket bound at abstract `name` (NCCL's
/// `ncclIpcSocketSendFd`), without blocking: `ErrorKind::WouldBlock` when the
/// peer's queue is full (retry later).
///
/// Errors: no such socket (`ConnectionRefused`: the peer has gone or lives in
/// another network namespace), `sendmsg` failing.
pub(crate) fn send_fd(name: &str, fd: BorrowedFd<'_>, tag: &[u8; TAG_BYTES]) -> io::Result<()> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let sock = UnixDatagram::unbound()?;
    sock.connect_addr(&addr)?;
    let mut iov = libc::iovec {
        iov_base: tag.as_ptr().cast_mut().cast(),
        iov_len: TAG_BYTES,
    };
    let mut cbuf = [0u64; 4];
    // SAFETY: a zeroed msghdr is a valid empty header; its fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as _;
    // SAFETY: `cbuf` holds CMSG_SPACE(sizeof(int)) bytes (32 >= 24), aligned for cmsghdr.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        libc::CMSG_DATA(c).cast::<libc::c_int>().write_unaligned(fd.as_raw_fd());
    }
    // SAFETY: `msg` points at live buffers of the sizes it states; the socket is ours.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != TAG_BYTES {
        return Err(io::Error::other(format!("sent {n} of {TAG_BYTES} bytes")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    /// A descriptor crosses the socket and names the same file; a wrong
    /// name is refused; an empty socket answers `None` at once.
    #[test]
    fn a_descriptor_crosses_the_socket() {
        let r = FdReceiver::bind().expect("bind");
        assert!(r.try_recv().expect("empty").is_none());
        let mut f = tempfile_memfd();
        f.write_all(b"through SCM_RIGHTS").unwrap();
        let tag = [7u8; TAG_BYTES];
        send_fd(r.name(), std::os::fd::AsFd::as_fd(&f), &tag).expect("send");
        let (fd, got) = r.try_recv().expect("recv").expect("a descriptor");
        assert_eq!(got, tag);
        let mut g = std::fs::File::from(fd);
        g.rewind().unwrap();
        let mut s = String::new();
        g.read_to_string(&mut s).unwrap();
        assert_eq!(s, "through SCM_RIGHTS");
        let e = send_fd("ferroccl-ipc-nobody-here", std::os::fd::AsFd::as_fd(&f), &tag).unwrap_err();
        assert!(
            matches!(e.kind(), io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound),
            "{e}"
        );
    }

    fn tempfile_memfd() -> std::fs::File {
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"ferroccl-ipcsock-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a descriptor just created for us to own.
        std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}
