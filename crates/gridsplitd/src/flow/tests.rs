//! Tests of flow/mod.rs.

use super::*;

fn rx(queue: &[&'static [u8]], credit_batch: usize) -> RxState {
    RxState {
        queue: queue.iter().map(|b| Bytes::from_static(b)).collect(),
        window_left: 0,
        fin: false,
        writing: false,
        lan: None,
        freed: 0,
        credit_batch,
        window: 0,
        moved: 0,
        spare: Vec::new(),
    }
}

/// The link reader and the flow task share the queue: a write takes buffers
/// from its head, what arrives meanwhile queues behind, and what the socket did
/// not take goes back to the head — so the node sees the bytes in order.
#[test]
fn a_partial_write_puts_the_rest_back_in_front() {
    let mut s = rx(&[b"aaaa", b"bbbb", b"cccc"], 10);
    let mut batch = Vec::new();
    s.take_batch(&mut batch);
    assert!(s.writing && s.queue.is_empty() && batch.len() == 3);
    // "dddd" arrives during the write, which takes "aaaa" and "bb" only.
    s.queue.push_back(Bytes::from_static(b"dddd"));
    batch.remove(0);
    bytes::Buf::advance(&mut batch[0], 2);
    assert_eq!(s.end_write(&mut batch, 6), None, "6 bytes freed < 10");
    assert!(!s.writing && batch.is_empty());
    let rest: Vec<u8> = s.queue.iter().flat_map(|b| b.to_vec()).collect();
    assert_eq!(rest, b"bbccccdddd");
    // The next write completes; credit goes back once a batch's worth is freed.
    s.take_batch(&mut batch);
    batch.clear();
    assert_eq!(s.end_write(&mut batch, 10), Some(16));
    assert_eq!((s.freed, s.window_left), (0, 16));
}

/// A flow through which a whole window has moved gets a window 4x as large
/// with its next credit, up to per_flow_buffer; the budget pays for it.
#[test]
fn a_window_that_moved_its_size_grows() {
    let limits = crate::config::Limits {
        per_flow_buffer: 4 << 20,
        total_buffer: 256 << 20,
        max_frame: 65536,
    };
    let pool = Arc::new(Semaphore::new(128 << 20));
    let any: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let f = Flow::new(3, pool.clone(), &limits, Origin::Remote, any, any);
    let w = f.set_window(
        pool.clone()
            .try_acquire_many_owned(INITIAL_WINDOW as u32)
            .unwrap(),
    );
    assert_eq!(w as usize, INITIAL_WINDOW);
    let mut sent_window = INITIAL_WINDOW;
    for _ in 0..6 {
        // The peer sends a whole window in 4 KiB frames; each is written out.
        let mut granted = 0;
        for _ in 0..sent_window / 4096 {
            f.deliver(Bytes::from(vec![0u8; 4096])).unwrap();
            let mut rx = f.rx.lock().unwrap();
            let mut batch = Vec::new();
            rx.take_batch(&mut batch);
            batch.clear();
            granted += f.end_write(&mut rx, &mut batch, 4096).unwrap_or(0) as usize;
        }
        let now = f.rx.lock().unwrap().window;
        assert_eq!(
            granted, now,
            "credit returned = what was freed + the growth"
        );
        sent_window = now;
    }
    assert_eq!(sent_window, 4 << 20);
    assert_eq!(pool.available_permits(), (128 << 20) - (4 << 20));
}

#[test]
fn a_write_takes_at_most_max_iov_buffers() {
    let mut s = rx(&[&b"x"[..]; 100], 1);
    let mut batch = Vec::new();
    s.take_batch(&mut batch);
    assert_eq!((batch.len(), s.queue.len()), (MAX_IOV, 100 - MAX_IOV));
}
