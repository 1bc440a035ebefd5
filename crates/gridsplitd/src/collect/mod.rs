//! The collect layer: the LAN side of the gateway.
//!
//! Nodes of our own site connect here and send a GSq1 request naming a destination
//! on another site. We admit only what the config allows — the node must be in our
//! own site's subnet and the destination in another configured site's subnet, so
//! the gateway can never be used as an open relay — then open a flow on the WAN
//! link to one of that site's gateways (route.rs) and answer GSa1 once the far
//! side's connect() has an outcome.
//!
//! The mirror image, `serve_remote_open`, runs on the far gateway when an OPEN
//! arrives: it connects to the destination from its own LAN address, writes the
//! GSo1 origin header, and relays.

pub mod egress;
pub mod incast;
pub mod mss;
pub mod route;

use bytes::Bytes;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tracing::{debug, warn};

use crate::flow::{self, Flow};
use crate::lanproto::{self, Status, REQUEST_LEN};
use crate::link::Link;
use crate::wire::Frame;
use crate::Shared;

/// Extra time, beyond connect_timeout, we wait for OPEN_REPLY: one WAN round trip
/// plus scheduling slack.
const REPLY_SLACK: Duration = Duration::from_secs(2);

/// Runs `f` every `period` until `stopping` is cancelled; a tick missed while
/// the runtime was busy is skipped, not made up (the LAN controls re-read the
/// sockets' state each time, so a late tick loses nothing).
pub(crate) async fn every(
    period: Duration,
    stopping: tokio_util::sync::CancellationToken,
    mut f: impl FnMut(),
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.cancelled() => return,
        }
        f();
    }
}

/// Accepts node connections on the LAN listener.
pub async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    // The MSS offered to our nodes (collect/mss.rs). `[lan] mss` was set before
    // listen(); the aligned default is set here, which the SYN-ACKs of later
    // connections carry just the same.
    if shared.cfg.lan.mss == 0 {
        if let Some(m) = mss::offered(lan_ip(&shared.cfg), 0) {
            if let Err(e) = socket2::SockRef::from(&listener).set_tcp_mss(m) {
                warn!("cannot offer LAN senders an MSS of {m}: {e}");
            }
        }
    }
    let stopping = shared.stopping.clone();
    crate::accept::serve(listener, stopping, "LAN", move |stream, node| {
        shared.metrics.lan_accepted.fetch_add(1, Ordering::Relaxed);
        serve_node(shared.clone(), stream, node)
    })
    .await
}

/// The gateway's LAN address: where it listens, or its site's gateway address
/// if it listens on all of them.
fn lan_ip(cfg: &crate::config::Config) -> IpAddr {
    if cfg.lan_listen.ip().is_unspecified() {
        cfg.own_site().gateway_lan.ip()
    } else {
        cfg.lan_listen.ip()
    }
}

async fn reply(shared: &Shared, stream: &mut TcpStream, status: Status) -> std::io::Result<()> {
    shared.metrics.replies[status as usize].fetch_add(1, Ordering::Relaxed);
    stream.write_all(&lanproto::encode_reply(status)).await
}

/// Decides whether `node` may reach `dst`, and over which link: to one of the
/// destination site's gateways, by the node pair (`route::spread_index`),
/// failing over to the next one up (route.rs).
fn admit(shared: &Shared, node: SocketAddr, dst: SocketAddr) -> Result<Arc<Link>, Status> {
    let cfg = &shared.cfg;
    if !cfg.own_site().subnet.contains(node.ip()) {
        debug!(%node, %dst, "refused: node is not in our site's subnet");
        return Err(Status::Forbidden);
    }
    let site = match cfg.site_of(dst.ip()) {
        Some(s) if s.name != cfg.site => s,
        _ => {
            debug!(%node, %dst, "refused: destination is not in another site's subnet");
            return Err(Status::Forbidden);
        }
    };
    if is_gateway_addr(shared, dst) {
        debug!(%node, %dst, "refused: destination is a gateway's own service");
        return Err(Status::Forbidden);
    }
    let gateways: Vec<&str> = cfg.gateways_of(&site.name).map(|g| g.id.as_str()).collect();
    let start = route::spread_index(node.ip(), dst, gateways.len());
    let i = route::pick(start, gateways.len(), |i| {
        shared.link_to(gateways[i]).is_some_and(|l| l.is_up())
    });
    shared.link_to(gateways[i]).ok_or(Status::NoLink)
}

/// Gateways' own listeners are never relay destinations: a flow into a gateway's
/// LAN port would be a relay loop, into its WAN port an attack on the link.
/// Every gateway of every site counts (each `[[site]]` table is one).
fn is_gateway_addr(shared: &Shared, dst: SocketAddr) -> bool {
    shared
        .cfg
        .sites
        .iter()
        .any(|s| s.gateway_lan == dst || s.gateway_wan == dst)
        || dst == shared.cfg.lan_listen
        || dst == shared.cfg.wan_listen
}

async fn serve_node(shared: Arc<Shared>, mut stream: TcpStream, node: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let mut req = [0u8; REQUEST_LEN];
    match tokio::time::timeout(shared.cfg.connect_timeout, stream.read_exact(&mut req)).await {
        Ok(Ok(_)) => {}
        _ => {
            // Closed or silent before a full request: nobody to answer.
            shared.metrics.replies[Status::BadRequest as usize].fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    let dst = match lanproto::parse_request(&req) {
        Ok(d) => d,
        Err(e) => {
            debug!(%node, "bad GSq1 request: {e}");
            let _ = reply(&shared, &mut stream, Status::BadRequest).await;
            return;
        }
    };
    let link = match admit(&shared, node, dst) {
        Ok(l) => l,
        Err(status) => {
            let _ = reply(&shared, &mut stream, status).await;
            return;
        }
    };
    let Some(window) = window_within(&shared, shared.cfg.connect_timeout).await else {
        let _ = reply(&shared, &mut stream, Status::Timeout).await;
        return;
    };
    let Some((flow, answer)) = link.open_local_flow(window, dst, node) else {
        let _ = reply(&shared, &mut stream, Status::NoLink).await;
        return;
    };
    let outcome = tokio::time::timeout(shared.cfg.connect_timeout + REPLY_SLACK, answer).await;
    let status = match outcome {
        Ok(Ok((code, credit))) => {
            let s = flow::reply_status(code);
            if s == Status::Ok {
                flow.add_credit(credit);
            }
            s
        }
        // The flow was aborted before an answer: the link went away.
        Ok(Err(_)) => Status::NoLink,
        Err(_) => {
            // Give up on it; tell the far side so it doesn't connect for nothing.
            flow.abort();
            link.queue_control(Frame::Reset {
                flow: flow.id,
                reason: crate::wire::ResetReason::Aborted,
            });
            Status::Timeout
        }
    };
    if status != Status::Ok || flow.is_aborted() {
        let status = if status == Status::Ok {
            Status::NoLink
        } else {
            status
        };
        debug!(%node, %dst, status = status.name(), "connect request failed");
        let _ = reply(&shared, &mut stream, status).await;
        link.forget_flow(flow.id);
        return;
    }
    if reply(&shared, &mut stream, Status::Ok).await.is_err() {
        flow.abort();
        link.queue_control(Frame::Reset {
            flow: flow.id,
            reason: crate::wire::ResetReason::LanReset,
        });
        link.forget_flow(flow.id);
        return;
    }
    shared.metrics.flows_opened.fetch_add(1, Ordering::Relaxed);
    crate::tune::apply_lan(&stream, &shared.cfg.lan);
    let stream = Arc::new(stream);
    let _clamped = shared.lan_windows.register(&stream, &flow.bytes_up);
    let _paced = shared.lan_egress.register(&stream, &flow.bytes_down);
    flow::relay(flow, link, stream, None).await;
}

/// IP_BIND_ADDRESS_NO_PORT: bind() to the LAN address leaves the port to
/// connect(), which picks it for the whole 4-tuple. Without it, bind() picks a
/// port no socket on that address holds, searching past every one held or left
/// in TIME_WAIT by earlier flows: thousands of flows made opens slow (bench
/// scale, a second run right after a first of 10,000 flows) and would cap a
/// gateway at one ephemeral range of connections in all. Best effort: an old
/// kernel without it still connects. (socket2 has no setter for it.)
fn bind_address_no_port(sock: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a valid socket descriptor, and an int option of the right size.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

async fn connect_from(
    lan_ip: IpAddr,
    dst: SocketAddr,
    limit: Duration,
    mss: Option<u32>,
) -> Result<TcpStream, Status> {
    let sock = if dst.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    };
    let sock = sock.map_err(|e| Status::from_connect_error(&e))?;
    // From our own LAN address: the destination's libgridsplit.so recognises a
    // gateway of its site by this address and then expects the GSo1 header.
    if !lan_ip.is_unspecified() && lan_ip.is_ipv4() == dst.is_ipv4() {
        bind_address_no_port(&sock);
        sock.bind(SocketAddr::new(lan_ip, 0))
            .map_err(|e| Status::from_connect_error(&e))?;
    }
    // Our SYN offers the destination the MSS our own nodes get (collect/mss.rs):
    // what it sends back through us then fits the WAN segment for segment.
    if let Some(m) = mss {
        let _ = socket2::SockRef::from(&sock).set_tcp_mss(m);
    }
    let stream = match tokio::time::timeout(limit, sock.connect(dst)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(Status::from_connect_error(&e)),
        Err(_) => return Err(Status::Timeout),
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Handles an OPEN from the peer: policy check, connect to the destination, reply,
/// then relay. The flow is already registered on the link (so RESET/CREDIT
/// frames find it while we connect).
/// A new flow's receive window, waiting at most `limit` for the receive budget:
/// a gateway whose flows hold all of it refuses the open (the node's connect
/// fails) rather than leave it waiting. None also when the gateway stops.
async fn window_within(
    shared: &Shared,
    limit: std::time::Duration,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    let w = flow::reserve_window(&shared.recv_pool, &shared.cfg.limits);
    match tokio::time::timeout(limit, w).await {
        Ok(w) => w,
        Err(_) => {
            shared
                .metrics
                .flows_refused_budget
                .fetch_add(1, Ordering::Relaxed);
            warn!(
                flows = shared.metrics.flows_active.load(Ordering::Relaxed),
                total_buffer = shared.cfg.limits.total_buffer,
                "flow refused: the receive budget is held by open flows; raise [limits] total_buffer"
            );
            None
        }
    }
}

pub async fn serve_remote_open(
    shared: Arc<Shared>,
    link: Arc<Link>,
    flow: Arc<Flow>,
    dst: SocketAddr,
    src: SocketAddr,
) {
    let cfg = &shared.cfg;
    let own = cfg.own_site();
    let peer_ok = cfg
        .sites
        .iter()
        .any(|s| s.name == link.site && s.subnet.contains(src.ip()));
    let status = if !own.subnet.contains(dst.ip()) || !peer_ok || is_gateway_addr(&shared, dst) {
        // An authenticated but misconfigured (or hostile) peer: refuse, don't relay.
        warn!(peer = %link.peer, %src, %dst, "refused OPEN outside the configured subnets");
        Err(Status::Forbidden)
    } else {
        tokio::select! {
            r = connect_from(own.gateway_lan.ip(), dst, cfg.connect_timeout,
                             mss::offered(lan_ip(cfg), cfg.lan.mss)) => r,
            _ = flow.aborted() => {
                link.forget_flow(flow.id);
                return;
            }
        }
    };
    shared.metrics.remote_opens[status.as_ref().err().copied().unwrap_or(Status::Ok) as usize]
        .fetch_add(1, Ordering::Relaxed);
    let stream = match status {
        Ok(s) => s,
        Err(status) => {
            debug!(peer = %link.peer, %src, %dst, status = status.name(), "far connect failed");
            link.queue_control(Frame::OpenReply {
                flow: flow.id,
                status: status as u8,
                window: 0,
            });
            link.forget_flow(flow.id);
            return;
        }
    };
    let permit = tokio::select! {
        w = window_within(&shared, cfg.connect_timeout) => w,
        _ = flow.aborted() => None,
    };
    let Some(permit) = permit else {
        if !flow.is_aborted() {
            link.queue_control(Frame::OpenReply {
                flow: flow.id,
                status: Status::Timeout as u8,
                window: 0,
            });
        }
        link.forget_flow(flow.id);
        return;
    };
    let window = flow.set_window(permit);
    // The node learns its peer from the GSo1 header, so it goes out before the
    // peer gateway hears that the flow is open: from then on a stop or a reset
    // may close the socket at any moment. A fresh socket takes it at once; if it
    // somehow does not, the relay writes it first thing.
    let origin = lanproto::encode_origin(src);
    let sent = stream.try_write(&origin).unwrap_or(0);
    let rest = (sent < origin.len()).then(|| Bytes::copy_from_slice(&origin[sent..]));
    link.queue_control(Frame::OpenReply {
        flow: flow.id,
        status: Status::Ok as u8,
        window,
    });
    crate::tune::apply_lan(&stream, &shared.cfg.lan);
    let stream = Arc::new(stream);
    let _clamped = shared.lan_windows.register(&stream, &flow.bytes_up);
    let _paced = shared.lan_egress.register(&stream, &flow.bytes_down);
    flow::relay(flow, link, stream, rest).await;
}
