//! Passing a file descriptor to another process over a Unix socket (`SCM_RIGHTS`): how the
//! cross-process tests hand a VMM allocation's POSIX handle to their child.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Room for one control message carrying one descriptor, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// Sends `fd` (a duplicate of it arrives on the other side) with one byte of data.
pub fn send_fd(socket: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut byte = [b'F'];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = Control([0; 64]);
    // SAFETY: pure arithmetic on a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    // SAFETY: a C struct of integers and pointers, for which all zeroes is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer has `space` bytes, enough for one header and one int; the
    // header pointer is inside it and aligned (the buffer is).
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        if header.is_null() {
            return Err(io::Error::other("no room for the control message"));
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), fd.as_raw_fd());
    }
    // SAFETY: the message points at live locals for the duration of the call.
    let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, 0) };
    if sent < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Receives a descriptor sent with [`send_fd`]; it is opened close-on-exec.
pub fn receive_fd(socket: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = Control([0; 64]);
    // SAFETY: a C struct of integers and pointers, for which all zeroes is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: the message points at live locals for the duration of the call.
    let received = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if received < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `msg` and the control buffer it points to.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        if header.is_null()
            || (*header).cmsg_level != libc::SOL_SOCKET
            || (*header).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::other("the message carried no descriptor"));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>());
        if fd < 0 {
            return Err(io::Error::other("the message carried an invalid descriptor"));
        }
        // The kernel installed a new descriptor in this process, owned by nobody else.
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    #[test]
    fn a_descriptor_crosses_a_socket_pair() -> io::Result<()> {
        let (a, b) = UnixStream::pair()?;
        let path = std::env::temp_dir().join(format!("cuda-tests-fd-{}", std::process::id()));
        let mut file =
            std::fs::File::options().create(true).truncate(true).read(true).write(true).open(&path)?;
        file.write_all(b"passed")?;
        send_fd(&a, file.as_fd())?;
        let received = receive_fd(&b)?;
        let mut other = std::fs::File::from(received);
        other.rewind()?;
        let mut text = String::new();
        other.read_to_string(&mut text)?;
        std::fs::remove_file(&path)?;
        assert_eq!(text, "passed");
        Ok(())
    }
}
