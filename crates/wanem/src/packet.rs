//! AF_PACKET socket bound to one interface: the only way frames enter and leave us.
//!
//! Each frame crosses the socket behind a `virtio_net_hdr` (PACKET_VNET_HDR). Frames
//! from a veth are usually CHECKSUM_PARTIAL (the checksum field is not filled in yet)
//! and often GSO super-frames of up to 64 KiB; without the header the kernel would
//! have to finish the checksum and segment on receive, and we would send out frames
//! whose checksums the far side finds wrong. With it, a frame leaves exactly as it
//! came in, offload state included.
//!
//! Each interface has two sockets: one that receives (for the direction that starts
//! there) and one that only transmits (for the direction that ends there). The
//! receiving one sets PACKET_IGNORE_OUTGOING, so it never sees what either socket
//! sends. The transmitting one asks for a software transmit timestamp on every
//! frame: the veth stamps a frame when it takes it, which is the moment the frame
//! leaves us, and those stamps wait on that socket's error queue. On a socket of
//! its own they cannot wake the receiving thread (poll reports a non-empty error
//! queue to every poller).

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// `struct virtio_net_hdr` without `num_buffers`: what PACKET_VNET_HDR puts in front.
pub const VNET_HDR_LEN: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;
const ETH_HLEN: usize = 14;
const ETH_ALEN: usize = 6;
const VLAN_HLEN: usize = 4;
const ETH_P_8021Q: u16 = 0x8100;

/// Room for the largest GSO frame a veth hands out by default (gso_max_size 64 KiB)
/// plus Ethernet, a VLAN tag and the header. Bigger frames (BIG TCP) are reported as
/// truncated and dropped, never forwarded mangled.
pub const RX_SLOT_LEN: usize = VNET_HDR_LEN + 65_536 + 512;

/// Enough for one timestamp and one auxdata message, 8-byte aligned.
const CTRL_LEN: usize = 128;

/// Socket buffers sized for bursts at 1 Gb/s: 32 MiB is ~250 ms of line rate on
/// receive, far beyond any scheduling hiccup we expect to ride out.
const RCVBUF_BYTES: libc::c_int = 32 << 20;
const SNDBUF_BYTES: libc::c_int = 8 << 20;

pub fn interface_index(name: &str) -> io::Result<u32> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cname` is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(index)
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size we pass.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifname: String,
}

/// What a socket is for; see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Receive,
    Transmit,
}

impl PacketSocket {
    pub fn open(ifname: &str, role: Role) -> io::Result<PacketSocket> {
        let ifindex = interface_index(ifname)?;
        let with_context =
            |what: &str, e: io::Error| io::Error::new(e.kind(), format!("{ifname}: {what}: {e}"));

        // Protocol 0: the socket receives nothing until `bind` below names both the
        // protocol and the interface, so no frame from another interface slips in.
        // SAFETY: plain syscall; the fd is owned right away.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })
        .map_err(|e| with_context("socket(AF_PACKET)", e))?;
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();

        let one: libc::c_int = 1;
        setsockopt(raw, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(|e| with_context("PACKET_VNET_HDR", e))?;
        if role == Role::Receive {
            setsockopt(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
                .map_err(|e| with_context("PACKET_IGNORE_OUTGOING", e))?;
            // VLAN tags offloaded to skb metadata are not in the frame bytes; auxdata
            // is how we learn them so that we can put them back.
            setsockopt(raw, libc::SOL_PACKET, libc::PACKET_AUXDATA, &one)
                .map_err(|e| with_context("PACKET_AUXDATA", e))?;
            // The kernel stamps a frame when the veth hands it over, before it waits
            // in our queue; the delay is measured from there, not from when we got
            // around to reading it.
            setsockopt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, &one)
                .map_err(|e| with_context("SO_TIMESTAMPNS", e))?;
        } else {
            // Only the stamp, not a copy of the frame, comes back on the error queue.
            let flags = (libc::SOF_TIMESTAMPING_TX_SOFTWARE
                | libc::SOF_TIMESTAMPING_SOFTWARE
                | libc::SOF_TIMESTAMPING_OPT_TSONLY) as libc::c_int;
            setsockopt(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPING, &flags)
                .map_err(|e| with_context("SO_TIMESTAMPING", e))?;
        }
        for (force, plain, bytes, what) in [
            (
                libc::SO_RCVBUFFORCE,
                libc::SO_RCVBUF,
                RCVBUF_BYTES,
                "SO_RCVBUF",
            ),
            (
                libc::SO_SNDBUFFORCE,
                libc::SO_SNDBUF,
                SNDBUF_BYTES,
                "SO_SNDBUF",
            ),
        ] {
            // The FORCE variants ignore net.core.{r,w}mem_max, which we must not touch.
            if setsockopt(raw, libc::SOL_SOCKET, force, &bytes).is_err() {
                setsockopt(raw, libc::SOL_SOCKET, plain, &bytes)
                    .map_err(|e| with_context(what, e))?;
                tracing::warn!(
                    iface = ifname,
                    "{what}: FORCE refused (not root?), capped by net.core sysctls"
                );
            }
        }

        // SAFETY: sockaddr_ll is plain data; zero is valid for every field.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        // A transmit-only socket binds protocol 0: the kernel delivers it nothing.
        if role == Role::Receive {
            addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        }
        addr.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `addr` is a valid sockaddr_ll of the size we pass.
        cvt(unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(|e| with_context("bind", e))?;

        // A veth delivers every frame anyway, but a real NIC would filter frames not
        // addressed to it; a delay line must pass them all. Undone when we close.
        // SAFETY: packet_mreq is plain data.
        if role == Role::Receive {
            let mut mreq: libc::packet_mreq = unsafe { zeroed() };
            mreq.mr_ifindex = ifindex as libc::c_int;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            setsockopt(raw, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(|e| with_context("promiscuous mode", e))?;
        }

        Ok(PacketSocket {
            fd,
            ifname: ifname.to_string(),
        })
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Waits up to `timeout_ns` for a frame (or a socket error, which the next
    /// receive reports). ppoll, unlike poll, takes nanoseconds: the timeout is the
    /// time until the head frame is due, and milliseconds would make us late.
    pub fn wait_readable(&self, timeout_ns: u64) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask change.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(r > 0)
    }

    /// Receives up to one batch without blocking; returns how many frames arrived
    /// (0 when none were waiting).
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        for m in batch.msgs.iter_mut() {
            m.msg_hdr.msg_controllen = CTRL_LEN as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: every mmsghdr points at an iovec and a control buffer owned by
        // `batch`, which outlives the call; the kernel writes within the lengths given.
        batch.received = unsafe { self.recvmmsg(&mut batch.msgs, 0)? };
        Ok(batch.received)
    }

    /// One non-blocking recvmmsg into `msgs` (with `flags` added); returns how many
    /// messages arrived, 0 when none were waiting or a signal interrupted the call.
    ///
    /// # Safety
    /// Every mmsghdr in `msgs` must point at buffers that are valid for the lengths
    /// it gives, and that the kernel may write to.
    unsafe fn recvmmsg(&self, msgs: &mut [libc::mmsghdr], flags: libc::c_int) -> io::Result<usize> {
        let r = libc::recvmmsg(
            self.fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as _,
            flags | libc::MSG_DONTWAIT,
            ptr::null_mut(),
        );
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(r as usize)
    }

    /// Sends `frames` (each with its virtio_net_hdr in front) in one sendmmsg.
    /// Returns how many were sent: fewer than asked means the next one failed, and
    /// the caller learns why by sending it again.
    pub fn send_batch<'a>(
        &self,
        batch: &mut SendBatch,
        frames: impl Iterator<Item = &'a [u8]>,
    ) -> io::Result<usize> {
        batch.iovs.clear();
        for frame in frames.take(batch.capacity) {
            batch.iovs.push(libc::iovec {
                iov_base: frame.as_ptr() as *mut _,
                iov_len: frame.len(),
            });
        }
        batch.msgs.clear();
        for iov in batch.iovs.iter_mut() {
            // SAFETY: mmsghdr is plain data; zero means no address and no control data.
            let mut m: libc::mmsghdr = unsafe { zeroed() };
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
            batch.msgs.push(m);
        }
        if batch.msgs.is_empty() {
            return Ok(0);
        }
        // SAFETY: each mmsghdr points at one iovec in `batch.iovs`, which points at a
        // frame borrowed for the duration of the call; the kernel only reads them.
        // No address: the socket is bound to the interface.
        let r = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                batch.msgs.as_mut_ptr(),
                batch.msgs.len() as _,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }

    /// The transmit stamps (CLOCK_REALTIME ns) of the frames sent since the last call,
    /// oldest first, into `out` (cleared first). A transmit socket only.
    pub fn take_tx_stamps(&self, batch: &mut StampBatch, out: &mut Vec<u64>) -> io::Result<()> {
        out.clear();
        loop {
            for m in batch.msgs.iter_mut() {
                m.msg_hdr.msg_controllen = CTRL_LEN as _;
                m.msg_hdr.msg_flags = 0;
            }
            // SAFETY: as in recv_batch; the iovecs are empty, the control buffers
            // belong to `batch`.
            let r = unsafe { self.recvmmsg(&mut batch.msgs, libc::MSG_ERRQUEUE)? };
            for m in &batch.msgs[..r] {
                // SAFETY: the kernel filled the control buffer and set its length.
                unsafe {
                    let mut cmsg = libc::CMSG_FIRSTHDR(&m.msg_hdr);
                    while !cmsg.is_null() {
                        let c = &*cmsg;
                        if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPING
                        {
                            // struct scm_timestamping: ts[0] is the software stamp.
                            let ts: libc::timespec =
                                ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                            out.push(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                        }
                        cmsg = libc::CMSG_NXTHDR(&m.msg_hdr, cmsg);
                    }
                }
            }
            if r < batch.msgs.len() {
                return Ok(());
            }
        }
    }

    /// Frames the kernel dropped because our receive buffer was full since the last
    /// call (the kernel resets the counter when read).
    pub fn take_drops(&self) -> io::Result<u64> {
        // SAFETY: tpacket_stats is plain data.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid out-pointers of matching size.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        })?;
        Ok(st.tp_drops.into())
    }
}

/// Buffers for one recvmmsg: they are set up once and reused, so receiving
/// allocates nothing. Holds raw pointers into itself, hence built on the thread
/// that uses it.
pub struct RecvBatch {
    bufs: Box<[u8]>,
    // Never read directly: `msgs` points into these two, which must live as long.
    // u64 so that control messages are aligned as cmsghdr requires.
    _ctrl: Box<[u64]>,
    _iovs: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    received: usize,
}

impl RecvBatch {
    pub fn new(capacity: usize) -> RecvBatch {
        // Zeroed allocation: pages a small frame never touches stay unbacked.
        let mut bufs = vec![0u8; capacity * RX_SLOT_LEN].into_boxed_slice();
        let mut ctrl = vec![0u64; capacity * CTRL_LEN / 8].into_boxed_slice();
        let mut iovs: Box<[libc::iovec]> = (0..capacity)
            .map(|i| libc::iovec {
                iov_base: bufs[i * RX_SLOT_LEN..].as_mut_ptr().cast(),
                iov_len: RX_SLOT_LEN,
            })
            .collect();
        let msgs = (0..capacity)
            .map(|i| {
                // SAFETY: mmsghdr is plain data; zero is a valid starting value.
                let mut m: libc::mmsghdr = unsafe { zeroed() };
                m.msg_hdr.msg_iov = &mut iovs[i];
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = ctrl[i * CTRL_LEN / 8..].as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = CTRL_LEN as _;
                m
            })
            .collect();
        RecvBatch {
            bufs,
            _ctrl: ctrl,
            _iovs: iovs,
            msgs,
            received: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// The frames of the last receive.
    pub fn frames(&self) -> impl Iterator<Item = RxFrame<'_>> {
        (0..self.received).map(move |i| self.frame(i))
    }

    fn frame(&self, i: usize) -> RxFrame<'_> {
        let m = &self.msgs[i];
        let len = (m.msg_len as usize).min(RX_SLOT_LEN);
        let mut frame = RxFrame {
            data: &self.bufs[i * RX_SLOT_LEN..i * RX_SLOT_LEN + len],
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len < VNET_HDR_LEN + ETH_HLEN,
            kernel_realtime_ns: None,
            vlan: None,
        };
        // SAFETY: the kernel filled the control buffer and set msg_controllen to what
        // it wrote; the CMSG_* macros stay within it. Payloads are read unaligned.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            while !cmsg.is_null() {
                let c = &*cmsg;
                if c.cmsg_level == libc::SOL_SOCKET && c.cmsg_type == libc::SCM_TIMESTAMPNS {
                    let ts: libc::timespec = ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                    if ts.tv_sec > 0 {
                        frame.kernel_realtime_ns =
                            Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                    }
                } else if c.cmsg_level == libc::SOL_PACKET && c.cmsg_type == libc::PACKET_AUXDATA {
                    let aux: libc::tpacket_auxdata =
                        ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                    if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                        let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                            aux.tp_vlan_tpid
                        } else {
                            ETH_P_8021Q
                        };
                        frame.vlan = Some(VlanTag {
                            tpid,
                            tci: aux.tp_vlan_tci,
                        });
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&m.msg_hdr, cmsg);
            }
        }
        frame
    }
}

/// Control buffers for reading transmit stamps off the error queue.
pub struct StampBatch {
    _ctrl: Box<[u64]>,
    msgs: Box<[libc::mmsghdr]>,
}

impl StampBatch {
    pub fn new(capacity: usize) -> StampBatch {
        let mut ctrl = vec![0u64; capacity * CTRL_LEN / 8].into_boxed_slice();
        let msgs = (0..capacity)
            .map(|i| {
                // SAFETY: mmsghdr is plain data; zero is a valid starting value.
                let mut m: libc::mmsghdr = unsafe { zeroed() };
                m.msg_hdr.msg_control = ctrl[i * CTRL_LEN / 8..].as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = CTRL_LEN as _;
                m
            })
            .collect();
        StampBatch { _ctrl: ctrl, msgs }
    }
}

/// A VLAN tag the kernel had lifted out of the frame into metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    pub tpid: u16,
    pub tci: u16,
}

pub struct RxFrame<'a> {
    /// virtio_net_hdr followed by the Ethernet frame.
    pub data: &'a [u8],
    /// Larger than our buffer or shorter than the headers: unusable.
    pub truncated: bool,
    pub kernel_realtime_ns: Option<u64>,
    pub vlan: Option<VlanTag>,
}

impl RxFrame<'_> {
    /// The frame as it travels (without our header, with its VLAN tag): a GSO
    /// super-frame counts every segment it stands for.
    pub fn wire_shape(&self) -> WireShape {
        let shape = wire_shape(self.data);
        let tag = if self.vlan.is_some() { VLAN_HLEN } else { 0 };
        WireShape {
            segments: shape.segments,
            wire_len: shape.wire_len + shape.segments as usize * tag,
        }
    }

    /// Bytes `to_owned_frame` will hold.
    pub fn stored_len(&self) -> usize {
        self.data.len() + if self.vlan.is_some() { VLAN_HLEN } else { 0 }
    }

    /// A copy to hold in the delay queue, ready to send as it is.
    pub fn to_owned_frame(&self) -> Box<[u8]> {
        match self.vlan {
            None => self.data.into(),
            Some(tag) => with_vlan_tag(self.data, tag),
        }
    }
}

/// Puts an offloaded VLAN tag back into the frame: a socket transmit has no way to
/// pass it as metadata. The checksum offsets in the virtio header count from the
/// start of the frame, so they move by the tag's four bytes too.
pub fn with_vlan_tag(data: &[u8], tag: VlanTag) -> Box<[u8]> {
    let (hdr, frame) = data.split_at(VNET_HDR_LEN);
    let mut out = Vec::with_capacity(data.len() + VLAN_HLEN);
    out.extend_from_slice(hdr);
    out.extend_from_slice(&frame[..2 * ETH_ALEN]);
    out.extend_from_slice(&tag.tpid.to_be_bytes());
    out.extend_from_slice(&tag.tci.to_be_bytes());
    out.extend_from_slice(&frame[2 * ETH_ALEN..]);

    // Layout (native endian, as af_packet uses on little-endian hosts): flags u8,
    // gso_type u8, hdr_len u16, gso_size u16, csum_start u16, csum_offset u16.
    let bump = |out: &mut Vec<u8>, at: usize| {
        let v = u16::from_ne_bytes([out[at], out[at + 1]]);
        if v != 0 {
            out[at..at + 2].copy_from_slice(&(v + VLAN_HLEN as u16).to_ne_bytes());
        }
    };
    bump(&mut out, 2); // hdr_len
    if out[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
        bump(&mut out, 6); // csum_start
    }
    out.into_boxed_slice()
}

/// What a frame (virtio_net_hdr in front) stands for on a real link: a GSO
/// super-frame (GRO merged it on our receive side) is `segments` MTU-sized frames,
/// each carrying its own copy of the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireShape {
    pub segments: u32,
    /// Bytes on the wire over all segments (Ethernet headers included, no FCS).
    pub wire_len: usize,
}

/// Reads the GSO fields of `data` (virtio_net_hdr + Ethernet frame; the header
/// layout is described in `with_vlan_tag`). A plain frame is one segment.
pub fn wire_shape(data: &[u8]) -> WireShape {
    let frame_len = data.len().saturating_sub(VNET_HDR_LEN);
    let plain = WireShape {
        segments: 1,
        wire_len: frame_len,
    };
    if data.len() < VNET_HDR_LEN {
        return plain;
    }
    let u16_at = |at: usize| u16::from_ne_bytes([data[at], data[at + 1]]) as usize;
    let gso_type = data[1] & !VIRTIO_NET_HDR_GSO_ECN;
    let gso_size = u16_at(4);
    if gso_type == VIRTIO_NET_HDR_GSO_NONE || gso_size == 0 {
        return plain;
    }
    // The headers every segment repeats end where the payload starts. The
    // checksum offload fields locate the L4 header exactly (hdr_len from an
    // AF_PACKET receive is only the skb's linear length, an upper bound).
    let l4_start = if data[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
        Some(u16_at(6))
    } else {
        None
    };
    let headers = match (gso_type, l4_start) {
        (VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_TCPV6, Some(l4))
            if VNET_HDR_LEN + l4 + 13 <= data.len() =>
        {
            l4 + usize::from(data[VNET_HDR_LEN + l4 + 12] >> 4) * 4
        }
        (VIRTIO_NET_HDR_GSO_UDP_L4, Some(l4)) => l4 + 8,
        _ => u16_at(2),
    };
    if headers == 0 || headers >= frame_len {
        return plain;
    }
    let segments = (frame_len - headers).div_ceil(gso_size).max(1);
    WireShape {
        segments: segments as u32,
        wire_len: frame_len + (segments - 1) * headers,
    }
}

/// Scratch arrays for one sendmmsg, reused so that sending allocates nothing.
pub struct SendBatch {
    capacity: usize,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl SendBatch {
    pub fn new(capacity: usize) -> SendBatch {
        SendBatch {
            capacity,
            iovs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests;
