//! A `multipart/form-data` body (RFC 7578), parsed by `multer` as it streams in, into its
//! parts, within a size limit.

use axum::body::Body;

/// One part of a form: a field's text or an uploaded file's bytes.
#[derive(Debug)]
pub struct Part {
    /// The field name, with `-` read as `_` (whisper.cpp's README spells
    /// `response-format`, its server reads `response_format`).
    pub name: String,
    /// The uploaded file's name, for a file part.
    pub file_name: Option<String>,
    pub data: Vec<u8>,
}

/// The parts of a form, in the order sent.
#[derive(Debug, Default)]
pub struct Form {
    parts: Vec<Part>,
}

/// Why a body is not a form: 400 (malformed) or 413 (over the limit), and the detail.
#[derive(Debug, PartialEq, Eq)]
pub struct FormError {
    pub status: u16,
    pub message: String,
}

impl Form {
    /// Reads `body` as the multipart form its `Content-Type` announces, refusing it once
    /// more than `limit` bytes have arrived.
    pub async fn parse(content_type: &str, body: Body, limit: u64) -> Result<Form, FormError> {
        let bad = |message: String| FormError {
            status: 400,
            message,
        };
        let boundary = multer::parse_boundary(content_type)
            .map_err(|e| bad(format!("Content-Type {content_type:?}: {e}")))?;
        let constraints =
            multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(limit));
        let mut multipart =
            multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
        let fail = |e: multer::Error| match e {
            multer::Error::StreamSizeExceeded { limit } => FormError {
                status: 413,
                message: format!("the request body is larger than {limit} bytes"),
            },
            e => bad(format!("malformed multipart/form-data body: {e}")),
        };
        let mut parts = Vec::new();
        while let Some(field) = multipart.next_field().await.map_err(fail)? {
            let name = field.name().unwrap_or_default().replace('-', "_");
            let file_name = field.file_name().map(str::to_string);
            let data = field.bytes().await.map_err(fail)?.to_vec();
            parts.push(Part {
                name,
                file_name,
                data,
            });
        }
        Ok(Form { parts })
    }

    /// The first part called `name`.
    pub fn part(&self, name: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.name == name)
    }

    /// Every part called `name` (repeated fields such as `timestamp_granularities[]`).
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Part> + 'a {
        self.parts.iter().filter(move |p| p.name == name)
    }

    /// The text of the first field called `name`, trimmed; an error if it is not UTF-8.
    pub fn text(&self, name: &str) -> Result<Option<&str>, String> {
        match self.part(name) {
            None => Ok(None),
            Some(p) => std::str::from_utf8(&p.data)
                .map(|s| Some(s.trim()))
                .map_err(|_| format!("{name}: the value is not UTF-8 text")),
        }
    }

    /// The names of every part, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(|p| p.name.as_str())
    }

    /// Takes the first part called `name` out of the form (the upload, without a copy).
    pub fn take(&mut self, name: &str) -> Option<Part> {
        let i = self.parts.iter().position(|p| p.name == name)?;
        Some(self.parts.remove(i))
    }
}

/// Test helpers: a form encoded as a browser or curl would send it, and a parse that waits.
#[cfg(test)]
pub mod encode {
    /// `(name, file name, bytes)` parts as a multipart body, with its `Content-Type`.
    pub fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
        let boundary = "------------------------sotto0123456789";
        let mut body = Vec::new();
        for (name, file, data) in parts {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            match file {
                Some(f) => body.extend_from_slice(
                    format!(
                        "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n\
                         Content-Type: application/octet-stream\r\n\r\n"
                    )
                    .as_bytes(),
                ),
                None => body.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                ),
            }
            body.extend_from_slice(data);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        (format!("multipart/form-data; boundary={boundary}"), body)
    }

    /// [`super::Form::parse`] of an in-memory body, run to completion.
    pub fn parse(ct: &str, body: Vec<u8>, limit: u64) -> Result<super::Form, super::FormError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(super::Form::parse(ct, body.into(), limit))
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{multipart, parse};
    use proptest::prelude::*;

    const BIG: u64 = 1 << 20;

    #[test]
    fn fields_and_files() {
        let (ct, body) = multipart(&[
            ("response-format", None, b" srt "),
            ("file", Some("a.wav"), b"RIFF\r\n--not a boundary\x00\xff"),
            ("timestamp_granularities[]", None, b"word"),
            ("timestamp_granularities[]", None, b"segment"),
        ]);
        let mut form = parse(&ct, body, BIG).unwrap();
        assert_eq!(form.text("response_format").unwrap(), Some("srt"));
        assert_eq!(form.all("timestamp_granularities[]").count(), 2);
        assert_eq!(form.text("missing").unwrap(), None);
        let file = form.take("file").unwrap();
        assert_eq!(file.file_name.as_deref(), Some("a.wav"));
        assert_eq!(file.data, b"RIFF\r\n--not a boundary\x00\xff");
        assert!(form.part("file").is_none());
    }

    #[test]
    fn bad_bodies_are_errors() {
        let (ct, body) = multipart(&[("file", Some("a.wav"), &[7u8; 3000])]);
        assert_eq!(
            parse("application/json", body.clone(), BIG)
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            parse("multipart/form-data", body.clone(), BIG)
                .unwrap_err()
                .status,
            400
        );
        let cut = body[..body.len() - 10].to_vec();
        assert_eq!(parse(&ct, cut, BIG).unwrap_err().status, 400);
        assert_eq!(parse(&ct, body.clone(), 1000).unwrap_err().status, 413);
        let (ct, body) = multipart(&[("language", None, b"\xff\xfe")]);
        assert!(parse(&ct, body, BIG).unwrap().text("language").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sotto_testdata::fuzz_cases(64)))]

        #[test]
        fn parts_round_trip(parts in proptest::collection::vec(
            ("[a-z_]{1,12}", proptest::option::of("[a-z]{1,8}\\.wav"),
             proptest::collection::vec(any::<u8>(), 0..300)), 0..6)) {
            let refs: Vec<(&str, Option<&str>, &[u8])> = parts
                .iter()
                .map(|(n, f, d)| (n.as_str(), f.as_deref(), d.as_slice()))
                .collect();
            let (ct, body) = multipart(&refs);
            let form = parse(&ct, body, BIG).unwrap();
            prop_assert_eq!(form.parts.len(), parts.len());
            for (p, (n, f, d)) in form.parts.iter().zip(&parts) {
                prop_assert_eq!(&p.name, n);
                prop_assert_eq!(&p.file_name, f);
                prop_assert_eq!(&p.data, d);
            }
        }

        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse("multipart/form-data; boundary=sotto0123456789", body, BIG);
        }
    }
}
