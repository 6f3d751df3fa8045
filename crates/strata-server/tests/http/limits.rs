//! The connection layer's limits, as kube-apiserver's Go server has them: a request header
//! over 1 MiB is answered 431; a client that does not finish its header within 32 s is
//! disconnected without an answer, while a kept-alive connection waits 90 s for its next
//! request; the server announces its HTTP/2 stream limit
//! (`--http2-max-streams-per-connection`, Go's 250 by default) in its SETTINGS; and a body
//! over the size limit is answered 413 with a Status over HTTP/2, the client being let to
//! finish sending it, as over HTTP/1.1.

use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{within, TestServer};

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

/// An HTTP/2 connection (prior knowledge over plain TCP, which the test servers speak) with
/// the `h2` crate's client, its connection driven in the background.
async fn h2_connect(addr: &str) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, conn) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send.ready().await.expect("the connection is ready")
}

/// A ConfigMap whose JSON is a little over `size` bytes.
fn config_map_of(size: usize) -> Bytes {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {"blob": "x".repeat(size)},
    });
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

/// Sends `body` on `stream` as flow control allows, in pieces of at most 64 KiB, ending the
/// stream with the last one. Fails if the server resets the stream first.
async fn send_body(mut stream: h2::SendStream<Bytes>, mut body: Bytes) -> Result<(), h2::Error> {
    while !body.is_empty() {
        stream.reserve_capacity(body.len().min(64 * 1024));
        let granted = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => {
                let reason = std::future::poll_fn(|cx| stream.poll_reset(cx)).await?;
                return Err(h2::Error::from(reason));
            }
        };
        let piece = body.split_to(granted.min(body.len()));
        stream.send_data(piece, body.is_empty())?;
    }
    Ok(())
}

/// The status and body of an HTTP/2 answer.
async fn read_answer(answer: h2::client::ResponseFuture) -> (u16, Bytes) {
    let resp = answer.await.expect("an answer, not a reset stream");
    let code = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the answer's body");
        let _ = body.flow_control().release_capacity(chunk.len());
        bytes.extend_from_slice(&chunk);
    }
    (code, Bytes::from(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_over_http2_gets_the_413_status() {
    let s = TestServer::start();
    let uri = format!("http://{}{CONFIG_MAPS}", s.addr);
    within(Duration::from_secs(60), async {
        let mut client = h2_connect(&s.addr).await;
        // One body declares its length, which is refused before anything is read; the other
        // comes in pieces, refused once it passes the limit.
        for declared in [true, false] {
            let body = config_map_of(4 << 20);
            let mut req = hyper::Request::post(&uri).header("content-type", "application/json");
            if declared {
                req = req.header("content-length", body.len());
            }
            let (answer, stream) = client
                .send_request(req.body(()).unwrap(), false)
                .expect("send the request's header");
            // The client goes on sending while the answer comes, as curl and client-go do.
            let sending = tokio::spawn(send_body(stream, body));
            let (code, text) = read_answer(answer).await;
            assert_eq!(code, 413, "{}", String::from_utf8_lossy(&text));
            let status: Value = serde_json::from_slice(&text).expect("a Status");
            assert_eq!(status["kind"], "Status");
            assert_eq!(status["reason"], "RequestEntityTooLarge");
            assert_eq!(status["code"], 413);
            assert_eq!(
                status["message"],
                "Request entity too large: limit is 3145728"
            );
            // The server read the rest instead of resetting the stream under the client.
            sending
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("declared={declared}: the stream was reset: {e}"));
        }
        // The connection still serves.
        let req = hyper::Request::get(format!("http://{}/version", s.addr))
            .body(())
            .unwrap();
        let (answer, _) = client.send_request(req, true).unwrap();
        assert_eq!(read_answer(answer).await.0, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_settings_announce_the_stream_limit() {
    within(Duration::from_secs(60), async {
        for (flags, limit) in [
            (&[][..], 250),
            (&["--http2-max-streams-per-connection=7"][..], 7),
        ] {
            let s = TestServer::start_with(flags);
            let mut client = h2_connect(&s.addr).await;
            // After one exchange the server's SETTINGS, its first frame, have been read.
            let req = hyper::Request::get(format!("http://{}/version", s.addr))
                .body(())
                .unwrap();
            let (answer, _) = client.send_request(req, true).unwrap();
            assert_eq!(read_answer(answer).await.0, 200);
            assert_eq!(client.current_max_send_streams(), limit, "{flags:?}");
        }
    })
    .await;
}

/// Sends `head` on a new connection and returns what the server answers before it closes
/// the connection (or 10 s pass).
async fn raw_answer(addr: &str, head: &[u8]) -> String {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    // The server may stop reading (and answer) before the whole head is written.
    let _ = conn.write_all(head).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_header_over_1_mib_gets_431() {
    let s = TestServer::start();
    let head = |value_bytes: usize| {
        format!(
            "GET /version HTTP/1.1\r\nHost: strata\r\nConnection: close\r\nX-Padding: {}\r\n\r\n",
            "p".repeat(value_bytes)
        )
    };
    within(Duration::from_secs(60), async {
        // Under the limit (Go's MaxHeaderBytes, 1 MiB): served.
        let answer = raw_answer(&s.addr, head(1_000_000).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{:.200}", answer);
        // Over it, a little or far: 431, not a hang.
        for size in [1_100_000, 3_000_000] {
            let started = Instant::now();
            let answer = raw_answer(&s.addr, head(size).as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 431"), "{size}: {answer:.200}");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "answered at once"
            );
        }
        // The server serves on.
        assert_eq!(s.get("/version").await.code(), 200);
    })
    .await;
}

/// Reads from `conn` until it closes; `Err` if bytes come or it is still open at `until`.
async fn closed_without_answer(conn: &mut TcpStream, until: Instant) -> Result<(), String> {
    let mut buf = [0u8; 256];
    let left = until.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, conn.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Ok(()),
        Ok(Ok(n)) => Err(format!(
            "answered: {:?}",
            String::from_utf8_lossy(&buf[..n])
        )),
        Err(_) => Err("still open".into()),
    }
}

/// Sends a whole `GET /version` on `conn` and reads its answer (header and the body its
/// content-length announces); returns the status line.
async fn version_on(conn: &mut TcpStream) -> String {
    conn.write_all(b"GET /version HTTP/1.1\r\nHost: strata\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).await.expect("read an answer");
        assert!(
            n > 0,
            "closed before answering: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length: usize = text[..end]
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().unwrap())
            })
            .expect("a content-length");
        if got.len() >= end + 4 + length {
            return text.lines().next().unwrap_or_default().to_string();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_finish_its_header_within_32s_is_disconnected() {
    let s = TestServer::start();
    within(Duration::from_secs(60), async {
        let opened = Instant::now();
        // One client starts a request and never ends its header; another never sends a byte.
        let mut partial = TcpStream::connect(&s.addr).await.unwrap();
        partial
            .write_all(b"GET /version HTTP/1.1\r\nHost: strata\r\nX-Slow: ")
            .await
            .unwrap();
        let mut silent = TcpStream::connect(&s.addr).await.unwrap();
        // A third is answered, then waits; a fourth is answered, then starts a header it
        // never ends.
        let mut kept = TcpStream::connect(&s.addr).await.unwrap();
        assert_eq!(version_on(&mut kept).await, "HTTP/1.1 200 OK");
        let mut second = TcpStream::connect(&s.addr).await.unwrap();
        assert_eq!(version_on(&mut second).await, "HTTP/1.1 200 OK");
        second
            .write_all(b"GET /version HTTP/1.1\r\nX-Slow: ")
            .await
            .unwrap();
        // Until just before kube-apiserver's 32 s, all stay open and unanswered, while
        // others are served.
        assert_eq!(s.get("/version").await.code(), 200);
        let before = opened + Duration::from_secs(30);
        for conn in [&mut partial, &mut silent, &mut second] {
            assert_eq!(
                closed_without_answer(conn, before).await,
                Err("still open".into())
            );
        }
        // Then the three that owe a header are closed, without an answer.
        let after = opened + Duration::from_secs(40);
        for conn in [&mut partial, &mut silent, &mut second] {
            closed_without_answer(conn, after).await.unwrap();
        }
        // The one that finished its request is kept alive (kube-apiserver's IdleTimeout is
        // 90 s) and answers its next request; so does the test client's pooled connection.
        assert_eq!(version_on(&mut kept).await, "HTTP/1.1 200 OK");
        assert_eq!(s.get("/version").await.code(), 200);
    })
    .await;
}

/// A kept-alive HTTP/1.1 connection that sends nothing more is closed after 90 s, as
/// kube-apiserver's Go server closes it (`IdleTimeout`); one that goes on sending requests
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_kept_alive_connection_is_closed_after_90s() {
    let s = TestServer::start();
    within(Duration::from_secs(120), async {
        let mut idle = TcpStream::connect(&s.addr).await.unwrap();
        assert_eq!(version_on(&mut idle).await, "HTTP/1.1 200 OK");
        let answered = Instant::now();
        let mut busy = TcpStream::connect(&s.addr).await.unwrap();
        // `busy` asks every 20 s; `idle` waits.
        for _ in 0..4 {
            assert_eq!(version_on(&mut busy).await, "HTTP/1.1 200 OK");
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        // 80 s on, `idle` is still open.
        assert_eq!(
            closed_without_answer(&mut idle, answered + Duration::from_secs(85)).await,
            Err("still open".into())
        );
        closed_without_answer(&mut idle, answered + Duration::from_secs(100))
            .await
            .unwrap();
        assert_eq!(version_on(&mut busy).await, "HTTP/1.1 200 OK");
    })
    .await;
}
