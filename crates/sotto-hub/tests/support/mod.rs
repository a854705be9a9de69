//! A tiny HTTP/1.1 server on 127.0.0.1 and builders for fake PyPI packages.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;

use sha2::{Digest, Sha256};

/// What the server answers for one path.
#[derive(Clone)]
pub enum Reply {
    Body(Vec<u8>),
    Status(u16),
    /// Announces the full length, sends `at` bytes, then closes the connection.
    Cut {
        body: Vec<u8>,
        at: usize,
    },
    /// 302 to `location` with extra headers (Hugging Face's X-Linked-*).
    Redirect {
        location: String,
        headers: Vec<(String, String)>,
    },
}

pub struct Server {
    pub base: String,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let routes: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let hits: Arc<Mutex<Vec<String>>> = Arc::default();
        let (r, h) = (routes.clone(), hits.clone());
        // Serves until the test process exits; only this process ever connects.
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (r, h) = (r.clone(), h.clone());
                thread::spawn(move || serve(stream, &r, &h));
            }
        });
        Server { base, routes, hits }
    }

    pub fn route(&self, path: &str, reply: Reply) {
        self.routes.lock().unwrap().insert(path.to_string(), reply);
    }

    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }

    /// Publishes `wheel` as the only wheel of `package`, with the given size and sha256 claims.
    pub fn publish(&self, package: &str, wheel: &[u8], size: u64, sha256: &str) {
        let filename = format!("{}-1.0-py3-none-any.whl", package.replace('-', "_"));
        let wheel_path = format!("/files/{filename}");
        let json = serde_json::json!({
            "info": {"name": package, "version": "1.0"},
            "urls": [
                {"packagetype": "sdist", "filename": "x.tar.gz", "url": "/files/x.tar.gz",
                 "size": 1, "digests": {"sha256": "00".repeat(32)}},
                {"packagetype": "bdist_wheel", "filename": filename,
                 "url": format!("{}{wheel_path}", self.base),
                 "size": size, "digests": {"sha256": sha256}, "yanked": false},
            ]
        });
        self.route(
            &format!("/pypi/{package}/json"),
            Reply::Body(json.to_string().into_bytes()),
        );
        self.route(&wheel_path, Reply::Body(wheel.to_vec()));
    }

    /// Publishes `wheel` with honest size and sha256.
    pub fn publish_ok(&self, package: &str, wheel: &[u8]) {
        self.publish(package, wheel, wheel.len() as u64, &sha256_hex(wheel));
    }
}

fn serve(mut stream: TcpStream, routes: &Mutex<HashMap<String, Reply>>, hits: &Mutex<Vec<String>>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&request);
    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
    hits.lock().unwrap().push(path.clone());
    let reply = routes.lock().unwrap().get(&path).cloned();
    let head = |status: &str, len: usize, extra: &str| {
        format!("HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n{extra}\r\n")
    };
    let _ = match reply {
        None => stream.write_all(head("404 Not Found", 0, "").as_bytes()),
        Some(Reply::Status(code)) => {
            stream.write_all(head(&format!("{code} Whatever"), 0, "").as_bytes())
        }
        Some(Reply::Body(body)) => stream
            .write_all(head("200 OK", body.len(), "").as_bytes())
            .and_then(|_| stream.write_all(&body)),
        Some(Reply::Cut { body, at }) => stream
            .write_all(head("200 OK", body.len(), "").as_bytes())
            .and_then(|_| stream.write_all(&body[..at])),
        Some(Reply::Redirect { location, headers }) => {
            let mut extra = format!("Location: {location}\r\n");
            for (k, v) in headers {
                extra.push_str(&format!("{k}: {v}\r\n"));
            }
            stream.write_all(head("302 Found", 0, &extra).as_bytes())
        }
    };
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Both);
}

/// A base URL where nothing listens (connection refused at once).
pub fn unreachable_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A deflated zip with the given members, like a wheel.
pub fn wheel(members: &[(&str, &[u8])]) -> Vec<u8> {
    use zip::write::SimpleFileOptions;
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, data) in members {
        writer.start_file(*name, options).unwrap();
        writer.write_all(data).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

/// Deterministic bytes that do not compress to nothing.
pub fn noise(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// Names inside a folder, sorted; empty when the folder does not exist.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
