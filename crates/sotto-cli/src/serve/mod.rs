//! `sotto serve`: one loaded model answering HTTP requests, as whisper.cpp's
//! `whisper-server` (`POST /inference`, `POST /load`) and OpenAI's audio API
//! (`POST /v1/audio/transcriptions`, `/v1/audio/translations`) do.
//!
//! Requests are read on a small async runtime (axum over hyper): the multipart body streams
//! through `multer` within `--max-upload-mb`, the audio is decoded on a blocking thread,
//! and the job joins a bounded queue. `--workers` threads each own a [`sotto::Session`] of
//! the one shared [`Model`] and take jobs from the queue; a full queue answers 503 at once
//! rather than letting requests pile up. `POST /load` swaps the model; each worker reopens
//! its session before its next job. Ctrl-C or SIGTERM stops accepting and lets the requests
//! in flight finish.

mod api;
mod form;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use sotto::{Model, TranscribeOptions};
use tokio::sync::oneshot;

use crate::engine::EngineArgs;
use crate::progress;
use crate::transcribe::Decoding;
use api::{ApiError, Dialect, Job};
use form::Form;

#[derive(clap::Args)]
pub struct Args {
    /// Model loaded at start: a name (tiny.en, base, ...; fetched on first use) or a path
    /// to a CTranslate2 folder or ggml .bin. `POST /load` replaces it.
    #[arg(short, long, default_value = "tiny.en", value_name = "NAME|PATH")]
    model: String,

    /// Address to listen on (`0.0.0.0` for every interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,

    /// Port to listen on; 0 picks a free one (the address is printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,

    /// Transcriptions that run at once, each in its own session (KV caches, buffers) of the
    /// one loaded model. `--threads` then defaults to the cores shared out among them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,

    /// Requests that may wait for a free worker; the server answers 503 to any beyond them.
    #[arg(long, default_value_t = 8, value_name = "N")]
    queue: usize,

    /// Largest request body accepted, in MiB (413 above it).
    #[arg(long, default_value_t = 256, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    max_upload_mb: u64,

    /// Longest audio one request may carry, in minutes (413 above it, found while decoding,
    /// before the samples take more memory).
    #[arg(long, default_value_t = 180.0, value_name = "MINUTES", value_parser = positive_minutes)]
    max_audio_minutes: f64,

    /// Seconds a client has to send its whole request body (408 after).
    #[arg(long, default_value_t = 600, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    read_timeout: u64,

    /// The Silero VAD for requests with `vad_filter` (or whisper.cpp's `vad`), loaded at
    /// start: ONNX (faster-whisper's) or whisper.cpp's ggml file [default: the cached one,
    /// fetched and loaded on the first such request].
    #[arg(long, value_name = "PATH")]
    vad_model: Option<std::path::PathBuf>,

    /// Decode up to N chunks of speech together in requests that give no `batch_size`, as
    /// faster-whisper's BatchedInferencePipeline (see `sotto transcribe --batch-size`); a
    /// request's `batch_size` overrides it, 0 for one window at a time
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=api::MAX_BATCH as i64))]
    batch_size: Option<u32>,

    /// Refuse `POST /load`, which loads whatever model name or path a client sends.
    #[arg(long)]
    no_load: bool,

    /// Spoken language of requests that name none: a code, or `auto` to detect it
    /// [default: auto; English-only models use en].
    #[arg(short, long, value_name = "LANG")]
    language: Option<String>,

    #[command(flatten)]
    engine: EngineArgs,

    /// Defaults for every request; a request's own fields override them.
    #[command(flatten)]
    decoding: Box<Decoding>,
}

fn positive_minutes(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|m| m.is_finite() && *m > 0.0)
        .ok_or_else(|| format!("{s:?} is not a positive number of minutes"))
}

/// The model the workers serve, and a count that changes with each `POST /load`.
struct Loaded {
    generation: u64,
    name: String,
    model: Model,
}

/// What every request handler and worker shares.
struct Shared {
    loaded: RwLock<Loaded>,
    defaults: TranscribeOptions,
    /// `--batch-size`: the batch of requests that give none.
    batch_size: Option<usize>,
    hub: sotto::hub::Hub,
    device: sotto::Device,
    load_options: sotto::LoadOptions,
    /// Threads of each worker's session.
    threads: usize,
    workers: usize,
    queue: usize,
    limit: u64,
    /// Longest audio per request, seconds.
    max_audio: f64,
    read_timeout: Duration,
    allow_load: bool,
    /// The queue's sending end; taken at shutdown, which lets the workers finish.
    jobs: Mutex<Option<SyncSender<Work>>>,
    /// The VAD model, loaded (fetched if need be) by the first request that asks for it.
    vad: std::sync::OnceLock<Result<sotto::Vad, String>>,
    /// Transcription requests between arrival and answer, capped so that uploads being
    /// read and decoded cannot pile up in memory behind a full queue.
    in_flight: AtomicUsize,
}

impl Shared {
    /// Most transcription requests held at once: those running, those queued, and as many
    /// again being read.
    fn max_in_flight(&self) -> usize {
        2 * self.workers + self.queue
    }
}

/// A slot among [`Shared::max_in_flight`], given back when dropped.
struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Shared {
    fn model(&self) -> (u64, String, Model) {
        let l = self.loaded.read().unwrap_or_else(|p| p.into_inner());
        (l.generation, l.name.clone(), l.model.clone())
    }
}

/// A transcription waiting for a worker.
struct Work {
    job: Job,
    samples: Vec<f32>,
    /// The first two channels apart, for `diarize` on stereo audio.
    stereo: Option<[Vec<f32>; 2]>,
    name: String,
    reply: oneshot::Sender<Result<Reply, ApiError>>,
    /// For `stream=true`: each finished segment's event, as it is finished.
    events: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

struct Reply {
    body: Vec<u8>,
    content_type: &'static str,
}

pub fn run(hub: &sotto::hub::Hub, args: Args) -> anyhow::Result<ExitCode> {
    let device = args.engine.device()?;
    let load_options = args.engine.load_options()?;
    let workers = usize::from(args.workers);
    let threads = args.engine.threads_each(workers)?;
    let mut defaults = TranscribeOptions::default();
    if let Some(lang) = args.language.as_deref().filter(|l| *l != "auto") {
        let code = sotto::language_code(lang)
            .with_context(|| format!("--language: {lang:?} is not a Whisper language"))?;
        defaults.language = Some(code.to_string());
    }
    args.decoding.apply(&mut defaults)?;
    if args.batch_size.is_some() && defaults.audio_ctx.is_some() {
        bail!("--audio-ctx decodes one window at a time; it does not combine with --batch-size");
    }
    let model = Model::load_named_with(
        &args.model,
        hub,
        &mut progress::Download::new(),
        device,
        load_options,
    )?;
    crate::engine::device_note(&args.engine, &model);
    let running_on = model.device();
    // A model that cannot open a session fails here, not on the first request.
    drop(model.session(threads)?);

    let (jobs, queue) = mpsc::sync_channel(args.queue);
    let vad = std::sync::OnceLock::new();
    if let Some(path) = &args.vad_model {
        let _ = vad.set(Ok(sotto::Vad::load(path)?));
    }
    let shared = Arc::new(Shared {
        loaded: RwLock::new(Loaded {
            generation: 0,
            name: args.model.clone(),
            model,
        }),
        defaults,
        batch_size: args.batch_size.map(|n| n as usize),
        hub: hub.clone(),
        device,
        load_options,
        threads,
        workers,
        queue: args.queue,
        limit: args.max_upload_mb << 20,
        max_audio: args.max_audio_minutes * 60.0,
        read_timeout: Duration::from_secs(args.read_timeout),
        allow_load: !args.no_load,
        jobs: Mutex::new(Some(jobs)),
        in_flight: AtomicUsize::new(0),
        vad,
    });
    let queue = Arc::new(Mutex::new(queue));
    let mut handles = Vec::new();
    for i in 0..workers {
        let (shared, queue) = (shared.clone(), queue.clone());
        handles.push(
            std::thread::Builder::new()
                .name(format!("sotto-worker-{i}"))
                .spawn(move || worker(&shared, &queue))?,
        );
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sotto-http")
        .enable_all()
        .build()?;
    let app = router(shared.clone());
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "sotto: serving {} on {} ({workers} worker{} × {threads} thread{}) at http://{addr}",
            args.model,
            running_on,
            if workers == 1 { "" } else { "s" },
            if threads == 1 { "" } else { "s" },
        );
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown_signal())
            .await
            .context("serving HTTP")
    })?;
    // Every request has been answered; closing the queue stops the workers.
    shared.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
    for h in handles {
        let _ = h.join();
    }
    eprintln!("sotto: stopped");
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!("sotto: shutting down after the requests in flight");
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/inference", post(inference).options(preflight))
        .route(
            "/v1/audio/transcriptions",
            post(openai_transcriptions).options(preflight),
        )
        .route(
            "/v1/audio/translations",
            post(openai_translations).options(preflight),
        )
        .route("/load", post(load).options(preflight))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(log_and_cors))
        .with_state(shared)
}

/// Logs each request with its status and time, and lets browsers call the API from other
/// origins (as whisper.cpp's server does).
async fn log_and_cors(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let start = Instant::now();
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("content-type, authorization"),
    );
    eprintln!(
        "{method} {path} {} {:.0} ms",
        res.status().as_u16(),
        start.elapsed().as_secs_f64() * 1e3
    );
    res
}

fn json_response(v: serde_json::Value) -> JsonBody {
    JsonBody(v)
}

/// A JSON document as a 200 answer.
struct JsonBody(serde_json::Value);

impl IntoResponse for JsonBody {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}

fn error_response(e: &ApiError, dialect: Dialect) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        e.body(dialect),
    )
        .into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    res
}

async fn index(State(shared): State<Arc<Shared>>) -> Html<String> {
    let (_, name, _) = shared.model();
    Html(INDEX.replace("{model}", &html_escape(&name)))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const INDEX: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>sotto</title></head>
<body style="font-family: sans-serif; max-width: 50em; margin: 2em auto">
<h1>sotto</h1>
<p>Model: <code>{model}</code></p>
<pre>curl localhost:8080/inference -F file=@audio.wav -F response_format=json
curl localhost:8080/v1/audio/transcriptions -F file=@audio.mp3 -F response_format=verbose_json
curl localhost:8080/load -F model=base</pre>
<form action="/inference" method="post" enctype="multipart/form-data">
<p><input type="file" name="file" accept="audio/*" required></p>
<p><label>Language <input name="language" value="auto" size="6"></label>
<label>Format <select name="response_format">
<option>json</option><option>verbose_json</option><option>text</option>
<option>srt</option><option>vtt</option></select></label></p>
<p><button type="submit">Transcribe</button></p>
</form>
</body></html>
"#;

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    let (_, name, model) = shared.model();
    json_response(json!({
        "status": "ok",
        "model": name,
        "device": model.device().to_string(),
        "workers": shared.workers,
        "queue": shared.queue,
    }))
    .into_response()
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    let (_, name, _) = shared.model();
    json_response(json!({
        "object": "list",
        "data": [{ "id": name, "object": "model", "created": 0, "owned_by": "sotto" }],
    }))
    .into_response()
}

async fn preflight() -> Response {
    (
        StatusCode::NO_CONTENT,
        [(header::ACCESS_CONTROL_ALLOW_METHODS, "POST, OPTIONS")],
    )
        .into_response()
}

async fn not_found(req: Request) -> Response {
    error_response(
        &ApiError::new(404, format!("no such endpoint: {}", req.uri().path())),
        Dialect::WhisperCpp,
    )
}

async fn method_not_allowed(method: Method) -> Response {
    error_response(
        &ApiError::new(405, format!("{method} is not allowed here")),
        Dialect::WhisperCpp,
    )
}

async fn inference(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    answer(transcribe(shared, req, false).await, Dialect::WhisperCpp)
}

async fn openai_transcriptions(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    answer(transcribe(shared, req, false).await, Dialect::OpenAi)
}

async fn openai_translations(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    answer(transcribe(shared, req, true).await, Dialect::OpenAi)
}

/// What a transcription request gets: the whole answer, or (`stream=true`) its events as
/// they come.
enum Answer {
    Whole(Reply),
    Events(Body),
}

fn answer(r: Result<Answer, ApiError>, dialect: Dialect) -> Response {
    match r {
        Ok(Answer::Whole(reply)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, reply.content_type)],
            reply.body,
        )
            .into_response(),
        Ok(Answer::Events(body)) => (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/event-stream"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            body,
        )
            .into_response(),
        Err(e) => error_response(&e, dialect),
    }
}

/// The server-sent events of a streamed transcription: each segment's delta as the worker
/// sends it, then the worker's last word (`transcript.text.done`, or an error event).
/// `slot` holds the request's in-flight place until the stream ends.
fn event_stream(
    events: tokio::sync::mpsc::UnboundedReceiver<String>,
    answer: oneshot::Receiver<Result<Reply, ApiError>>,
    slot: OwnedSlot,
) -> Body {
    let state = (events, Some(answer), slot);
    let stream = futures_util::stream::unfold(state, |(mut events, answer, slot)| async move {
        if let Some(event) = events.recv().await {
            return Some((
                Ok::<_, std::convert::Infallible>(sse(&event)),
                (events, answer, slot),
            ));
        }
        let last = match answer?.await {
            Ok(Ok(reply)) => String::from_utf8_lossy(&reply.body).into_owned(),
            Ok(Err(e)) => json!({ "type": "error", "error": { "message": e.message } }).to_string(),
            Err(_) => {
                json!({ "type": "error", "error": { "message": "the worker stopped" } }).to_string()
            }
        };
        Some((Ok(sse(&last)), (events, None, slot)))
    });
    Body::from_stream(stream)
}

/// One server-sent event carrying `data` (one line of JSON).
fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// A request's in-flight place, held by an event stream that outlives the handler.
struct OwnedSlot(Arc<Shared>);

impl Drop for OwnedSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Most bytes read and dropped from a refused request's body, and for how long.
const DRAIN_MAX: u64 = 64 << 20;
const DRAIN_TIME: Duration = Duration::from_secs(30);

/// `e`, for a request refused before its body was read. A client that did not wait for
/// `100 Continue` is still sending; reading and dropping a bounded amount of the body lets
/// it read the answer rather than a reset connection.
async fn refuse(shared: &Shared, req: Request, e: ApiError) -> ApiError {
    let max = shared.limit.saturating_add(DRAIN_MAX);
    if content_length(&req).is_none_or(|n| n <= max) {
        let drain = async {
            use http_body_util::BodyExt;
            let (mut body, mut seen) = (req.into_body(), 0u64);
            while let Some(Ok(frame)) = body.frame().await {
                seen += frame.data_ref().map_or(0, |d| d.len() as u64);
                if seen > max {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(shared.read_timeout.min(DRAIN_TIME), drain).await;
    }
    e
}

fn content_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads a request's multipart form within the size and time limits.
async fn read_form(shared: &Shared, req: Request) -> Result<Form, ApiError> {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    if !ct.to_ascii_lowercase().starts_with("multipart/form-data") {
        let e = ApiError::new(
            415,
            format!("Content-Type {ct:?}: send a multipart/form-data form"),
        );
        return Err(refuse(shared, req, e).await);
    }
    if content_length(&req).is_some_and(|n| n > shared.limit) {
        let e = ApiError::new(
            413,
            format!(
                "the request body is larger than {} MiB (--max-upload-mb)",
                shared.limit >> 20
            ),
        );
        return Err(refuse(shared, req, e).await);
    }
    let body: Body = req.into_body();
    tokio::time::timeout(shared.read_timeout, Form::parse(&ct, body, shared.limit))
        .await
        .map_err(|_| ApiError::new(408, "the request body did not arrive in time"))?
        .map_err(|e| ApiError::new(e.status, e.message))
}

/// A transcription request from its arrival to its answer.
async fn transcribe(
    shared: Arc<Shared>,
    req: Request,
    translate_route: bool,
) -> Result<Answer, ApiError> {
    let held = shared.in_flight.fetch_add(1, Ordering::AcqRel);
    let _slot = Slot(&shared.in_flight);
    if held >= shared.max_in_flight() {
        return Err(refuse(&shared, req, busy(&shared)).await);
    }
    let mut form = read_form(&shared, req).await?;
    let unknown = api::unknown_fields(&form);
    if !unknown.is_empty() {
        eprintln!("note: ignored unknown fields {unknown:?}");
    }
    let job = api::read_job_with(&form, &shared.defaults, shared.batch_size, translate_route)?;
    let file = form.take("file").ok_or_else(|| {
        ApiError::bad_request("no `file` field in the request: send the audio as `file`")
    })?;
    let name = file.file_name.unwrap_or_else(|| "upload".into());
    let sotto::audio::Audio16k { mono, stereo } = {
        let (name, max, keep_stereo) = (name.clone(), shared.max_audio, job.diarize);
        tokio::task::spawn_blocking(move || decode(&name, file.data, max, keep_stereo))
            .await
            .map_err(|e| ApiError::new(500, format!("decoding the audio: {e}")))??
    };
    let (reply, answer) = oneshot::channel();
    let (events, stream) = if job.stream {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let work = Work {
        job,
        samples: mono,
        stereo,
        name,
        reply,
        events,
    };
    let sent = match &*shared.jobs.lock().unwrap_or_else(|p| p.into_inner()) {
        Some(jobs) => jobs.try_send(work),
        None => Err(TrySendError::Disconnected(work)),
    };
    match sent {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => return Err(busy(&shared)),
        Err(TrySendError::Disconnected(_)) => {
            return Err(ApiError::new(503, "the server is shutting down"))
        }
    }
    if let Some(events) = stream {
        // The stream keeps this request's in-flight place until it ends.
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = OwnedSlot(shared.clone());
        return Ok(Answer::Events(event_stream(events, answer, slot)));
    }
    answer
        .await
        .map_err(|_| ApiError::new(500, "the worker stopped before answering"))?
        .map(Answer::Whole)
}

fn busy(shared: &Shared) -> ApiError {
    ApiError::new(
        503,
        format!(
            "all {} workers are busy and {} requests wait: try again shortly",
            shared.workers, shared.queue
        ),
    )
}

/// An uploaded file as 16 kHz mono samples, at most `max_seconds` of them, and with
/// `keep_stereo` its first two channels apart; any fault in it is the client's (400, or 413
/// for audio too long).
fn decode(
    name: &str,
    bytes: Vec<u8>,
    max_seconds: f64,
    keep_stereo: bool,
) -> Result<sotto::audio::Audio16k, ApiError> {
    let hint = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let bad = |e: sotto::audio::AudioError| {
        let status = match e {
            sotto::audio::AudioError::TooLarge { .. } => 413,
            _ => 400,
        };
        ApiError::new(status, e.to_string())
    };
    sotto::audio::decode_bytes_16k_within(name, bytes, hint.as_deref(), max_seconds, keep_stereo)
        .map_err(bad)
}

/// A worker: takes jobs off the queue and runs them in its own session of the current model
/// until the queue closes.
fn worker(shared: &Shared, queue: &Mutex<Receiver<Work>>) {
    let mut session: Option<(u64, sotto::Session)> = None;
    loop {
        let work = {
            let queue = queue.lock().unwrap_or_else(|p| p.into_inner());
            match queue.recv() {
                Ok(w) => w,
                Err(_) => return,
            }
        };
        if work.reply.is_closed() || work.events.as_ref().is_some_and(|e| e.is_closed()) {
            continue; // the client left while the job waited
        }
        let start = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| run_job(shared, &mut session, &work)))
            .unwrap_or_else(|_| {
                // The session may be half-updated: open a fresh one for the next job.
                session = None;
                Err(ApiError::new(
                    500,
                    "the transcription failed unexpectedly (a bug; the server log has the panic)",
                ))
            });
        let audio_s = work.samples.len() as f64 / f64::from(sotto::audio::SAMPLE_RATE);
        match &result {
            Ok(_) => eprintln!(
                "{}: {audio_s:.1} s of audio in {:.0} ms",
                work.name,
                start.elapsed().as_secs_f64() * 1e3
            ),
            Err(e) => eprintln!("{}: {} {}", work.name, e.status, e.message),
        }
        let _ = work.reply.send(result);
    }
}

fn run_job(
    shared: &Shared,
    session: &mut Option<(u64, sotto::Session)>,
    work: &Work,
) -> Result<Reply, ApiError> {
    let (generation, _, model) = shared.model();
    if session.as_ref().map(|s| s.0) != Some(generation) {
        *session = None; // the old model's buffers go before the new ones are made
        let s = model
            .session(shared.threads)
            .map_err(|e| ApiError::new(500, format!("opening a session: {e}")))?;
        *session = Some((generation, s));
    }
    let Some((_, s)) = session.as_mut() else {
        unreachable!("a session was just opened")
    };
    let to_api = |e: sotto::Error| ApiError::from_sotto(&e);
    if work.job.detect_language {
        let d = s.detect_language(&work.samples).map_err(to_api)?;
        let top: Vec<_> = d
            .all
            .iter()
            .take(5)
            .map(|(code, p)| json!({ "language": code, "probability": p }))
            .collect();
        let body = json!({
            "language": d.language,
            "language_name": sotto::language_name(d.language),
            "probability": d.probability,
            "top": top,
        });
        return Ok(Reply {
            body: body.to_string().into_bytes(),
            content_type: "application/json",
        });
    }
    // Streamed: each segment's text as it is finished; a client that left stops the work.
    let mut on_segment = |seg: &sotto::Segment| match &work.events {
        None => true,
        Some(events) => {
            let delta = json!({ "type": "transcript.text.delta", "delta": seg.text });
            events.send(delta.to_string()).is_ok()
        }
    };
    let (job, samples) = (&work.job, &work.samples);
    let clips = !job.opts.clip_timestamps.is_empty();
    // The VAD for vad_filter, and for batched requests without clips.
    let vad = || -> Result<sotto::Vad, ApiError> {
        let vad = shared
            .vad
            .get_or_init(|| {
                sotto::Vad::load_cached(&shared.hub, &mut progress::Download::new())
                    .map_err(|e| format!("loading the VAD model: {e}"))
            })
            .as_ref()
            .map_err(|e| ApiError::new(500, e.clone()))?;
        let mut vad = vad.clone();
        vad.options = job.vad_options.clone();
        Ok(vad)
    };
    let t = match job.batch_size {
        Some(n) if clips => s
            .transcribe_batched_clips(samples, &job.opts, n, &mut on_segment)
            .map(|t| t.0),
        Some(n) => s
            .transcribe_batched(&vad()?, samples, &job.opts, n, &mut on_segment)
            .map(|t| t.0),
        None if job.vad => s.transcribe_speech(&vad()?, samples, &job.opts, &mut on_segment),
        None => s.transcribe(samples, &job.opts, &mut on_segment),
    }
    .map_err(to_api)?;
    if work.events.is_some() {
        let done = json!({ "type": "transcript.text.done", "text": t.text() });
        return Ok(Reply {
            body: done.to_string().into_bytes(),
            content_type: "text/event-stream",
        });
    }
    let speakers: Vec<_> = match &work.stereo {
        Some(ch) => (t.segments.iter())
            .map(|s| sotto::audio::diarize::speaker(ch, s.start, s.end))
            .collect(),
        None => Vec::new(),
    };
    let extras = crate::writers::Extras {
        speakers: &speakers,
        run: None,
        srt_offset: work.job.srt_offset,
    };
    let (body, content_type) = work.job.format.render(&t, work.job.opts.task, &extras);
    Ok(Reply { body, content_type })
}

/// `POST /load`: loads the model a form's `model` field names and swaps it in; on any error
/// the old model stays.
async fn load(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let r = async {
        if !shared.allow_load {
            let e = ApiError::new(403, "this server was started with --no-load");
            return Err(refuse(&shared, req, e).await);
        }
        let form = read_form(&shared, req).await?;
        let name = form
            .text("model")
            .map_err(ApiError::bad_request)?
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::bad_request("no `model` field in the request"))?
            .to_string();
        let s = shared.clone();
        let loaded = {
            let name = name.clone();
            tokio::task::spawn_blocking(move || {
                Model::load_named_with(
                    &name,
                    &s.hub,
                    &mut progress::Download::new(),
                    s.device,
                    s.load_options,
                )
            })
            .await
            .map_err(|e| ApiError::new(500, format!("loading: {e}")))?
        };
        let model = loaded.map_err(|e| {
            let status = match e {
                sotto::Error::Device(_) => 500,
                _ => 400,
            };
            ApiError::new(status, e.to_string())
        })?;
        let mut l = shared.loaded.write().unwrap_or_else(|p| p.into_inner());
        l.generation += 1;
        l.name = name.clone();
        l.model = model;
        eprintln!("sotto: now serving {name}");
        Ok(name)
    }
    .await;
    match r {
        Ok(name) => json_response(json!({ "status": "ok", "model": name })).into_response(),
        Err(e) => error_response(&e, Dialect::WhisperCpp),
    }
}
