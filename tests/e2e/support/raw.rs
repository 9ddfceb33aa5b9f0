//! Raw HTTP/1.1 on a socket of its own: what a client that is not a well-behaved HTTP
//! library sends and sees.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Server;

/// Sends raw bytes on a new connection and reads until the server closes it or
/// `patience` passes; returns what came back.
pub fn exchange(server: &Server, request: &[u8], patience: Duration) -> String {
    let mut stream = TcpStream::connect(server.address()).unwrap();
    stream.set_read_timeout(Some(patience)).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The JSON body of a raw HTTP/1.1 answer.
pub fn body_of(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// Whether the server closes `stream` within `within` (a read sees the end), however
/// much it sends meanwhile.
pub fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buffer = [0; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// An event stream of `token`'s tenant, its head read (a 200).
pub fn open_event_stream(server: &Server, token: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.address()).unwrap();
    let request = format!(
        "GET /api/compute/events/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        server.address()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = [0; 1024];
    let read = stream.read(&mut head).unwrap();
    assert!(String::from_utf8_lossy(&head[..read]).starts_with("HTTP/1.1 200"));
    stream
}

/// A GET that asks the server to close the connection after answering.
pub fn get_request(server: &Server, path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", server.address())
}
