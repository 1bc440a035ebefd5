//! Unit tests of the LAN receive-window shares: how shares follow the number of
//! open sockets, whole versus sub-segment shares, young flows, overcommitted
//! budgets, and (on loopback sockets) clamps and pacing as the kernel applies them.

use super::*;

fn window_clamp(s: &TcpStream) -> usize {
    super::window_clamp(s).unwrap()
}

/// The bytes-read counter of a socket the test reads by hand (bumped where it does).
fn counters() -> Arc<crate::flow::LanBytes> {
    Arc::default()
}

async fn pair(l: &tokio::net::TcpListener) -> (Arc<TcpStream>, TcpStream) {
    let addr = l.local_addr().unwrap();
    let c = TcpStream::connect(addr).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (Arc::new(s), c)
}

#[tokio::test]
async fn shares_follow_the_number_of_open_sockets() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = LanWindows::new(1_200_000, 4 << 20, false);
    let (a, _ca) = pair(&l).await;
    let ra = w.register(&a, &counters());
    // Shares are whole segments (loopback's MSS is large: 64 KB or so).
    let mss = SockRef::from(&*a).tcp_mss().unwrap() as usize;
    let whole = |v: usize| v / mss * mss;
    assert_eq!(window_clamp(&a), whole(1_200_000));
    let (b, _cb) = pair(&l).await;
    let (c, _cc) = pair(&l).await;
    let _rb = w.register(&b, &counters());
    let rc = w.register(&c, &counters());
    for s in [&a, &b, &c] {
        assert_eq!(window_clamp(s), whole(400_000));
    }
    drop(rc);
    assert_eq!(window_clamp(&a), whole(600_000));
    assert_eq!(window_clamp(&b), whole(600_000));
    // A socket already gone is left out without being touched.
    drop(a);
    let (d, _cd) = pair(&l).await;
    let _rd = w.register(&d, &counters());
    assert_eq!(window_clamp(&d), whole(600_000));
    drop(ra);
    assert_eq!(w.sockets_clamped.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_tick_looks_only_at_the_sockets_that_moved_bytes() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = LanWindows::new(1_200_000, 4 << 20, false);
    let (a, _ca) = pair(&l).await;
    let (b, _cb) = pair(&l).await;
    let (read_a, read_b) = (counters(), counters());
    let _ra = w.register(&a, &read_a);
    let _rb = w.register(&b, &read_b);
    let share = window_clamp(&a);
    // Both clamps moved behind the gateway's back (as the kernel does when a
    // segment changes the buffer's overhead ratio, see `clamp`).
    let set = |s: &TcpStream| {
        crate::tune::setsockopt_raw(s, libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, 50_000).unwrap()
    };
    set(&a);
    set(&b);
    w.tick();
    assert_eq!(window_clamp(&a), 50_000, "no socket moved: none looked at");
    // The relay read from one: the next tick puts its clamp back, and only its.
    read_a.add(100);
    w.tick();
    assert_eq!(window_clamp(&a), share);
    assert_eq!(window_clamp(&b), 50_000);
    // Listed once per look: a second tick finds nothing new.
    assert!(w.moves.take().is_empty());
}

const NARROW: Flow = Flow {
    mss: 1448,
    widest: 1536,
    young: false,
};
const WIDE: Flow = Flow {
    mss: 1448,
    widest: 64 << 10,
    young: false,
};

#[test]
fn whole_segments_while_they_fit() {
    assert_eq!(divide(23_600, 1 << 20, true, &[NARROW; 4]), vec![5792; 4]);
    // Narrow grown flows are widened one at a time while the budget has
    // room for it, young ones not.
    let twelve = divide(23_600, 1 << 20, true, &[NARROW; 12]);
    assert_eq!(twelve, [vec![2896], vec![1448; 11]].concat());
    assert_eq!(divide(23_600, 1 << 20, true, &[NARROW; 16]), vec![1448; 16]);
    let young = Flow {
        young: true,
        ..NARROW
    };
    assert_eq!(divide(23_600, 1 << 20, true, &[young; 12]), vec![1448; 12]);
    assert_eq!(divide(23_600, 1 << 20, true, &[WIDE; 12]), vec![1448; 12]);
    assert_eq!(divide(23_600, 1 << 20, true, &[WIDE; 16]), vec![1448; 16]);
    assert!(divide(23_600, 1 << 20, true, &[]).is_empty());
}

/// The paper grid's 20 senders: the flow that carried data alone keeps a
/// segment, the narrow ones share the rest below a segment.
#[test]
fn narrow_flows_get_sub_segment_shares_and_wide_ones_a_segment() {
    let mut flows = vec![NARROW; 20];
    flows[0] = WIDE;
    let shares = divide(23_600, 1 << 20, true, &flows);
    assert_eq!(shares[0], 1448);
    let sub = (23_600 - 1448) / 19;
    assert!(shares[1..].iter().all(|&s| s == sub), "{shares:?}");
    assert!(shares.iter().sum::<usize>() <= 23_600);
    // Without sub-segment shares, the clamps are lifted.
    assert_eq!(divide(23_600, 1 << 20, false, &flows), vec![1 << 20; 20]);
}

/// A flow offered more than twice the narrow share sends segments too big
/// for it, so it takes a segment, which can push others over the line.
#[test]
fn flows_too_wide_for_the_share_take_a_segment_until_it_settles() {
    // Narrow at the even share (1200), too wide once WIDE took its segment
    // (1186), and the share settles at 1172.
    let mid = Flow {
        mss: 1448,
        widest: 2390,
        young: false,
    };
    let mut flows = vec![NARROW; 18];
    flows.push(mid);
    flows.push(WIDE);
    let shares = divide(24_000, 1 << 20, true, &flows);
    assert_eq!(&shares[18..], &[1448, 1448]);
    let sub = (24_000 - 2 * 1448) / 18;
    assert!(shares[..18].iter().all(|&s| s == sub), "{shares:?}");
}

#[test]
fn young_flows_are_held_to_the_young_window_with_sub_segment_shares_only() {
    let young = Flow {
        young: true,
        ..NARROW
    };
    assert_eq!(
        divide(23_600, 1 << 20, true, &[young, NARROW]),
        vec![YOUNG_WINDOW, 11_584]
    );
    assert_eq!(
        divide(23_600, 1 << 20, false, &[young, NARROW]),
        vec![11_584, 11_584]
    );
}

#[test]
fn overcommitted_shares_keep_the_smallest_usable_windows() {
    // With sub-segment shares on, an overcommitted budget keeps the
    // smallest windows each flow can use instead.
    assert_eq!(
        divide(23_600, 1 << 20, true, &[NARROW; 21]),
        vec![MIN_SUB_SEGMENT; 21]
    );
    // Too many wide flows for a segment each.
    assert_eq!(divide(23_600, 1 << 20, true, &[WIDE; 17]), vec![1448; 17]);
    let mut flows = vec![NARROW; 20];
    flows[..17].fill(WIDE);
    assert_eq!(
        divide(23_600, 1 << 20, true, &flows),
        [vec![1448; 17], vec![MIN_SUB_SEGMENT; 3]].concat()
    );
    // Without them, the clamps are lifted.
    assert_eq!(
        divide(23_600, 1 << 20, false, &[NARROW; 21]),
        vec![1 << 20; 21]
    );
}

/// New sockets stay narrow until they have carried YOUNG_BYTES.
#[tokio::test]
async fn young_sockets_are_held_narrow() {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = LanWindows::new(1_200_000, 4 << 20, true);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(w.clone().maintain(stop.clone()));
    let (a, mut ca) = pair(&l).await;
    let moved = counters();
    let _ra = w.register(&a, &moved);
    assert_eq!(window_clamp(&a), YOUNG_WINDOW);
    tokio::time::sleep(4 * TICK).await;
    assert_eq!(
        window_clamp(&a),
        YOUNG_WINDOW,
        "time alone does not grow it"
    );
    let reader = tokio::spawn({
        let (a, moved) = (a.clone(), moved.clone());
        async move {
            let mut buf = vec![0u8; YOUNG_BYTES as usize];
            let mut got = 0;
            while got < buf.len() {
                a.readable().await.unwrap();
                if let Ok(n) = a.try_read(&mut buf[got..]) {
                    got += n;
                    moved.add(n as u64);
                }
            }
        }
    });
    ca.write_all(&vec![1u8; YOUNG_BYTES as usize])
        .await
        .unwrap();
    reader.await.unwrap();
    tokio::time::sleep(4 * TICK).await;
    let mss = SockRef::from(&*a).tcp_mss().unwrap() as usize;
    assert_eq!(window_clamp(&a), 1_200_000 / mss * mss);
    stop.cancel();
}

#[tokio::test]
async fn an_overcommitted_budget_lifts_the_clamps() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = LanWindows::new(8_000, 1 << 20, false);
    let mut keep = Vec::new();
    for _ in 0..4 {
        let (s, c) = pair(&l).await;
        keep.push((w.register(&s, &counters()), s, c));
    }
    let s = &keep[0].1;
    let mss = SockRef::from(&**s).tcp_mss().unwrap() as usize;
    assert!(
        8_000 / 4 < FLOOR_SEGMENTS * mss,
        "loopback MSS {mss} makes this test moot"
    );
    assert_eq!(window_clamp(s), 1 << 20);
}

/// The clamp must hold while data flows: Linux's receive autotuning resets a
/// bare TCP_WINDOW_CLAMP within a few round trips.
#[tokio::test]
async fn the_window_stays_clamped_under_load() {
    use tokio::io::AsyncWriteExt;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = LanWindows::new(300_000, 4 << 20, false);
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(w.clone().maintain(stop.clone()));
    let (s, mut c) = pair(&l).await;
    let moved = counters();
    let _r = w.register(&s, &moved);
    let reader = tokio::spawn({
        let (s, moved) = (s.clone(), moved.clone());
        async move {
            let mut buf = vec![0u8; 1 << 16];
            let mut total = 0;
            while total < 32 << 20 {
                s.readable().await.unwrap();
                match s.try_read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        total += n;
                        moved.add(n as u64);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
    });
    let chunk = vec![7u8; 1 << 20];
    let mut widest = 0;
    for i in 0..32 {
        c.write_all(&chunk).await.unwrap();
        if i == 4 {
            // Past the first round trips, where Linux resets the clamp once
            // and the maintainer puts it back within a tick.
            tokio::time::sleep(4 * TICK).await;
        } else if i > 4 {
            widest = widest.max(crate::tune::tcp_info(&c).unwrap().snd_wnd as usize);
        }
    }
    reader.await.unwrap();
    stop.cancel();
    // The window scale rounds the advertised window up to its unit.
    assert!(widest <= 300_000 + 4096, "window reached {widest} bytes");
}

#[tokio::test]
async fn off_leaves_sockets_alone() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let w = LanWindows::new(0, 4 << 20, true);
    let (a, _ca) = pair(&l).await;
    let before = window_clamp(&a);
    let _r = w.register(&a, &counters());
    assert_eq!(window_clamp(&a), before);
    assert_eq!(w.sockets_clamped.load(Ordering::Relaxed), 0);
}
