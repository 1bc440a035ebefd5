//! Unit tests of seal.rs: the handshake, round trips through real sockets with
//! partial writes, and the refusals (tampered, replayed, reordered, wrong key).

use super::*;

const PSK: &[u8] = b"0123456789abcdef0123";

/// One end's sealing and opening halves.
type Ends = (SealTx, OpenRx);

/// Both ends' states after an in-memory handshake.
fn pair(psk_a: &[u8], psk_b: &[u8], rekey: u64) -> Result<(Ends, Ends), snow::Error> {
    let (ka, kb) = (noise_psk(psk_a), noise_psk(psk_b));
    let pro = prologue("a", "b", &[1; 32], &[2; 32]);
    let mut i = snow::Builder::new(NOISE_PARAMS.parse()?)
        .psk(0, &ka)?
        .prologue(&pro)?
        .build_initiator()?;
    let mut r = snow::Builder::new(NOISE_PARAMS.parse()?)
        .psk(0, &kb)?
        .prologue(&pro)?
        .build_responder()?;
    let (mut m, mut p) = ([0u8; 256], [0u8; 256]);
    let n = i.write_message(&[], &mut m)?;
    r.read_message(&m[..n], &mut p)?;
    let n = r.write_message(&[], &mut m)?;
    i.read_message(&m[..n], &mut p)?;
    Ok((
        LaneKeys::with_rekey(i.into_stateless_transport_mode()?, rekey),
        LaneKeys::with_rekey(r.into_stateless_transport_mode()?, rekey),
    ))
}

/// Seals `data` as one batch and returns the ciphertext messages, each with
/// its length prefix, as if all were written.
fn seal_msgs(tx: &mut SealTx, data: &[u8]) -> Vec<Vec<u8>> {
    let segs = vec![Bytes::copy_from_slice(data)];
    let msgs = tx.seal(&segs, &mut Vec::new()).unwrap();
    let mut v = Vec::new();
    let mut start = 0;
    for (end, _) in msgs {
        tx.commit();
        v.push(tx.out[start..end].to_vec());
        start = end;
    }
    v
}

fn open(rx: &mut OpenRx, bytes: &[u8]) -> Result<Vec<u8>, CryptoError> {
    rx.cbuf.extend_from_slice(bytes);
    let mut plain = BytesMut::new();
    rx.open_all(&mut plain)?;
    Ok(plain.to_vec())
}

#[test]
fn messages_round_trip_in_chunks_and_through_rekeys() {
    let ((mut tx, _), (_, mut rx)) = pair(PSK, PSK, 3).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    let mut got = Vec::new();
    let mut left = &data[..];
    while !left.is_empty() {
        // A batch stops at a rekey boundary: seal what is left again.
        let msgs = seal_msgs(&mut tx, left);
        let plain: usize = msgs.iter().map(|m| m.len() - LEN - TAG).sum();
        assert!(msgs.iter().all(|m| m.len() <= LEN + MAX_MSG));
        left = &left[plain..];
        for m in msgs {
            got.extend(open(&mut rx, &m).unwrap());
        }
    }
    assert_eq!(got, data);
    assert!(tx.nonce > 3, "crossed rekey boundaries");
}

#[test]
fn no_plaintext_in_the_ciphertext() {
    let ((mut tx, _), _) = pair(PSK, PSK, REKEY_EVERY).unwrap();
    let pattern = b"GRIDSPLIT-PLAINTEXT-PATTERN-".repeat(100);
    let wire: Vec<u8> = seal_msgs(&mut tx, &pattern).concat();
    assert!(!wire
        .windows(16)
        .any(|w| pattern.windows(16).any(|p| p == w)));
}

#[test]
fn a_tampered_byte_is_refused() {
    let ((mut tx, _), (_, mut rx)) = pair(PSK, PSK, REKEY_EVERY).unwrap();
    let mut m = seal_msgs(&mut tx, b"hello, world").remove(0);
    m[LEN + 3] ^= 1;
    let e = open(&mut rx, &m).unwrap_err();
    assert!(matches!(e, CryptoError::Forged(0)), "{e}");
    assert!(e.to_string().contains("failed authentication"), "{e}");
}

#[test]
fn a_replayed_or_reordered_message_is_refused() {
    let ((mut tx, _), (_, mut rx)) = pair(PSK, PSK, REKEY_EVERY).unwrap();
    let a = seal_msgs(&mut tx, b"first").remove(0);
    let b = seal_msgs(&mut tx, b"second").remove(0);
    assert_eq!(open(&mut rx, &a).unwrap(), b"first");
    // Replayed: the same message again.
    assert!(matches!(open(&mut rx, &a), Err(CryptoError::Forged(1))));

    let ((mut tx, _), (_, mut rx)) = pair(PSK, PSK, REKEY_EVERY).unwrap();
    let a = seal_msgs(&mut tx, b"first").remove(0);
    let b2 = seal_msgs(&mut tx, b"second").remove(0);
    let _ = (a, b);
    // Reordered: the second message first.
    assert!(matches!(open(&mut rx, &b2), Err(CryptoError::Forged(0))));
}

#[test]
fn a_short_length_is_refused() {
    let (_, (_, mut rx)) = pair(PSK, PSK, REKEY_EVERY).unwrap();
    assert!(matches!(
        open(&mut rx, &[0, 3, 1, 2, 3]),
        Err(CryptoError::Short(3))
    ));
}

#[test]
fn a_different_key_fails_the_handshake() {
    assert!(pair(PSK, b"0123456789abcdefXXXX", REKEY_EVERY).is_err());
}

async fn sockets() -> (TcpStream, TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (s, _) = l.accept().await.unwrap();
    (c, s)
}

/// Through real sockets with a small send buffer, so that writes stop in the
/// middle of messages: the caller resends its unsent rest (with more data
/// behind it, as the link's writer does) and the receiver gets every byte once,
/// in order.
#[tokio::test]
async fn partial_writes_keep_the_stream_exact() {
    let (a, b) = sockets().await;
    socket2::SockRef::from(&a)
        .set_send_buffer_size(8192)
        .unwrap();
    let pro = prologue("a", "b", &[1; 32], &[2; 32]);
    let (ra, rb) = (&mut BytesMut::new(), &mut BytesMut::new());
    let (hi, hr) = tokio::join!(
        handshake(&a, ra, Role::Initiator, PSK, &pro),
        handshake(&b, rb, Role::Responder, PSK, &pro)
    );
    let ((mut tx, _), (_, mut rx)) = (hi.unwrap(), hr.unwrap());
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let want = data.clone();
    let reader = tokio::spawn(async move {
        let mut plain = BytesMut::new();
        while plain.len() < want.len() {
            b.readable().await.unwrap();
            rx.cbuf.reserve(65536);
            match crate::sockio::try_read_drain(&b, &mut rx.cbuf) {
                Ok(0) => panic!("closed"),
                Ok(_) => rx.open_all(&mut plain).unwrap(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            // A slow reader, so the sender's socket fills.
            tokio::task::yield_now().await;
        }
        assert_eq!(&plain[..], &want[..]);
    });
    let mut segs: Vec<Bytes> = Vec::new();
    let mut pos = 0;
    let mut partial = 0;
    while pos < data.len() || !segs.is_empty() {
        // Unsent rest first, then a few more segments of odd sizes.
        for len in [1, 700, 40_000, 70_000] {
            let end = (pos + len).min(data.len());
            if pos < end {
                segs.push(Bytes::copy_from_slice(&data[pos..end]));
                pos = end;
            }
        }
        if !try_write_sealed(&a, &mut tx, &mut segs).unwrap() {
            partial += tx.has_pending() as u32;
            a.writable().await.unwrap();
        }
    }
    reader.await.unwrap();
    assert!(partial > 0, "no write stopped inside a message");
}
