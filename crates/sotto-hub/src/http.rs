//! Streaming HTTP downloads with size and SHA-256 checks.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use ureq::http::header::{CONTENT_LENGTH, LOCATION};
use ureq::tls::{Certificate, RootCerts, TlsConfig};
use ureq::Agent;

use crate::{HubError, Progress};

const MAX_REDIRECTS: usize = 10;
const CHUNK: usize = 256 * 1024;

/// What the source promised about a file; checked after the download.
#[derive(Debug, Default, Clone)]
pub(crate) struct Expect {
    pub size: Option<u64>,
    /// Lower-case hex.
    pub sha256: Option<String>,
}

pub(crate) struct Client {
    agent: Agent,
}

impl Client {
    pub fn new(connect_timeout: Duration, read_timeout: Duration) -> Self {
        let config = Agent::config_builder()
            .timeout_resolve(Some(connect_timeout))
            .timeout_connect(Some(connect_timeout))
            .timeout_recv_response(Some(read_timeout))
            .timeout_per_read(Some(read_timeout))
            // Redirects are followed by hand so that Hugging Face's X-Linked-* headers are seen.
            .max_redirects(0)
            .http_status_as_error(false)
            .tls_config(TlsConfig::builder().root_certs(system_roots()).build())
            .user_agent(concat!("sotto-hub/", env!("CARGO_PKG_VERSION")))
            .build();
        Client {
            agent: config.new_agent(),
        }
    }

    /// GETs a small document (JSON metadata) into memory.
    pub fn get_bytes(&self, url: &str, limit: u64) -> Result<Vec<u8>, HubError> {
        let (resp, final_url, _) = self.get(url)?;
        let mut buf = Vec::new();
        resp.into_body()
            .into_with_config()
            .limit(limit)
            .reader()
            .read_to_end(&mut buf)
            .map_err(|e| HubError::Http {
                url: final_url,
                message: format!("reading body: {e}"),
            })?;
        Ok(buf)
    }

    /// Streams `url` into a new file at `dest`, checking length, size and SHA-256.
    /// On error `dest` may hold a partial file; the caller owns its removal.
    pub fn download(
        &self,
        url: &str,
        dest: &Path,
        what: &str,
        mut expect: Expect,
        progress: &mut dyn Progress,
    ) -> Result<(), HubError> {
        let (resp, final_url, linked) = self.get(url)?;
        // Hugging Face announces LFS size and sha256 on the redirect; use them when the caller has none.
        expect.size = expect.size.or(linked.size);
        expect.sha256 = expect.sha256.or(linked.sha256);
        let content_length = header_u64(resp.headers(), CONTENT_LENGTH.as_str());

        let file = File::create_new(dest).map_err(|e| HubError::io(dest, e))?;
        let mut out = BufWriter::with_capacity(CHUNK, file);
        let mut reader = resp.into_body().into_reader();
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut received = 0u64;
        progress.start(what, content_length.or(expect.size));
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(match content_length {
                        Some(expected) if received < expected => HubError::Truncated {
                            url: final_url,
                            received,
                            expected,
                        },
                        _ => HubError::Http {
                            url: final_url,
                            message: format!("reading body after {received} bytes: {e}"),
                        },
                    });
                }
            };
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| HubError::io(dest, e))?;
            received += n as u64;
            progress.advance(n as u64);
        }
        out.into_inner()
            .map_err(|e| HubError::io(dest, e.into_error()))?
            .sync_all()
            .map_err(|e| HubError::io(dest, e))?;
        progress.finish();

        if let Some(expected) = content_length {
            if received != expected {
                return Err(HubError::Truncated {
                    url: final_url,
                    received,
                    expected,
                });
            }
        }
        verify(what, &expect, received, &hex(&hasher.finalize()))
    }

    /// Sends a GET, following redirects; returns the 2xx response, its URL and linked metadata.
    fn get(
        &self,
        url: &str,
    ) -> Result<(ureq::http::Response<ureq::Body>, String, Expect), HubError> {
        let mut url = url.to_string();
        let mut linked = Expect::default();
        for _ in 0..=MAX_REDIRECTS {
            let resp = self.agent.get(&url).call().map_err(|e| HubError::Http {
                url: url.clone(),
                message: e.to_string(),
            })?;
            let status = resp.status().as_u16();
            let headers = resp.headers();
            if let Some(size) = header_u64(headers, "x-linked-size") {
                linked.size = Some(size);
            }
            if let Some(etag) = header_str(headers, "x-linked-etag") {
                let etag = etag
                    .trim_start_matches("W/")
                    .trim_matches('"')
                    .to_ascii_lowercase();
                if etag.len() == 64 && etag.bytes().all(|b| b.is_ascii_hexdigit()) {
                    linked.sha256 = Some(etag);
                }
            }
            if (200..300).contains(&status) {
                return Ok((resp, url, linked));
            }
            match header_str(headers, LOCATION.as_str()) {
                Some(loc) if (300..400).contains(&status) => url = join_url(&url, loc),
                _ => return Err(HubError::Status { url, status }),
            }
        }
        Err(HubError::Http {
            url,
            message: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }
}

/// Checks a finished download against what the source promised.
pub(crate) fn verify(what: &str, expect: &Expect, size: u64, sha256: &str) -> Result<(), HubError> {
    if let Some(expected) = expect.size {
        if expected != size {
            return Err(HubError::SizeMismatch {
                what: what.to_string(),
                expected,
                actual: size,
            });
        }
    }
    if let Some(expected) = &expect.sha256 {
        if !expected.eq_ignore_ascii_case(sha256) {
            return Err(HubError::HashMismatch {
                what: what.to_string(),
                expected: expected.clone(),
                actual: sha256.to_string(),
            });
        }
    }
    Ok(())
}

/// The system trust store (honours `SSL_CERT_FILE` / `SSL_CERT_DIR`); Mozilla's roots if it is empty.
fn system_roots() -> RootCerts {
    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        return RootCerts::WebPki;
    }
    let certs: Vec<Certificate<'static>> = found
        .certs
        .iter()
        .map(|der| Certificate::from_der(der.as_ref()).to_owned())
        .collect();
    RootCerts::from(certs)
}

fn header_str<'a>(headers: &'a ureq::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn header_u64(headers: &ureq::http::HeaderMap, name: &str) -> Option<u64> {
    header_str(headers, name).and_then(|v| v.trim().parse().ok())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Resolves a `Location` (or a URL found in JSON) against the URL it came from.
pub(crate) fn join_url(base: &str, reference: &str) -> String {
    if reference.contains("://") {
        return reference.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    if let Some(rest) = reference.strip_prefix("//") {
        return format!("{}{rest}", &base[..scheme_end]);
    }
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    if reference.starts_with('/') {
        return format!("{}{reference}", &base[..authority_end]);
    }
    let path = &base[..base.find(['?', '#']).unwrap_or(base.len())];
    let dir_end = path[authority_end..]
        .rfind('/')
        .map_or(path.len(), |i| authority_end + i);
    format!("{}/{reference}", &path[..dir_end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_url_forms() {
        let base = "https://h.example/a/b/c?x=1";
        assert_eq!(join_url(base, "https://o.example/z"), "https://o.example/z");
        assert_eq!(join_url(base, "//o.example/z"), "https://o.example/z");
        assert_eq!(join_url(base, "/z"), "https://h.example/z");
        assert_eq!(join_url(base, "z"), "https://h.example/a/b/z");
        assert_eq!(join_url("http://h:1", "z"), "http://h:1/z");
    }

    #[test]
    fn verify_checks_size_then_hash() {
        let expect = Expect {
            size: Some(3),
            sha256: Some("AB".repeat(32)),
        };
        assert!(matches!(
            verify("f", &expect, 4, "x"),
            Err(HubError::SizeMismatch {
                expected: 3,
                actual: 4,
                ..
            })
        ));
        assert!(matches!(
            verify("f", &expect, 3, &"cd".repeat(32)),
            Err(HubError::HashMismatch { .. })
        ));
        assert!(verify("f", &expect, 3, &"ab".repeat(32)).is_ok());
    }
}
