//! An HTTP embedding server: all-MiniLM-L6-v2 on tensorjit behind axum.
//!
//! ```text
//! cargo run --release --example serve -- /work/models/minilm/model.onnx \
//!     [--addr 127.0.0.1:8080] [--tokenizer PATH] [--backend jit] [--workers 1] [--max-batch 32] \
//!     [--max-texts 256] [--seq-buckets 16,32,64,128,256] [--batch-buckets 1,2,4,8,16,32]
//! curl -s localhost:8080/embed -H 'content-type: application/json' -d '{"texts":["hello world"]}'
//! ```
//!
//! `POST /embed {"texts": [...]}` answers `{"embeddings": [[...], ...]}` (L2-normalised, one per
//! text, in order); `GET /health` answers the process id, backend, embedding size and compiled
//! shapes (examples/loadtest.rs reads the pid to sample the server's memory).
//!
//! The model is compiled once, at startup, for every shape bucket (docs/serving.md); no request
//! compiles. Requests are handed to `--workers` threads through a queue; a worker takes the
//! oldest request and, up to `--max-batch` sentences, every request queued behind it, embeds them
//! in one batch (sorted by length, padded to shape buckets), and answers each request with its
//! own rows. Executions run on tensorjit's thread pool (all cores, shared by the workers); the
//! async runtime only parses, queues and serialises.

#[path = "support/minilm.rs"]
mod minilm;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use minilm::{Embedder, EmbedderOptions, Res, parse_sizes, tokenizer_path};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

#[derive(Deserialize)]
struct EmbedRequest {
    texts: Vec<String>,
}

#[derive(Serialize)]
struct EmbedResponse {
    embeddings: Vec<Vec<f32>>,
}

/// A queued request: its texts and where to send its embeddings.
struct Job {
    texts: Vec<String>,
    reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

struct AppState {
    queue: mpsc::SyncSender<Job>,
    max_texts: usize,
    health: serde_json::Value,
}

type ApiError = (StatusCode, String);

async fn embed(
    State(st): State<Arc<AppState>>,
    Json(req): Json<EmbedRequest>,
) -> Result<Json<EmbedResponse>, ApiError> {
    if req.texts.len() > st.max_texts {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, format!("at most {} texts per request", st.max_texts)));
    }
    if req.texts.is_empty() {
        return Ok(Json(EmbedResponse { embeddings: Vec::new() }));
    }
    let (tx, rx) = oneshot::channel();
    let job = Job { texts: req.texts, reply: tx };
    // The queue is bounded: a full queue parks this task's blocking send on a blocking thread
    // rather than stalling the runtime (back-pressure instead of unbounded memory).
    let queue = st.queue.clone();
    tokio::task::spawn_blocking(move || queue.send(job))
        .await
        .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "workers stopped".to_string()))?;
    match rx.await {
        Ok(Ok(embeddings)) => Ok(Json(EmbedResponse { embeddings })),
        Ok(Err(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, e)),
        Err(_) => Err((StatusCode::INTERNAL_SERVER_ERROR, "worker dropped the request".into())),
    }
}

async fn get_health(State(st): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(st.health.clone())
}

/// A worker: takes the oldest job, adds queued jobs while they fit in `max_batch` sentences,
/// embeds them together and answers each.
fn worker(emb: Arc<Embedder>, rx: Arc<std::sync::Mutex<mpsc::Receiver<Job>>>, max_batch: usize) {
    // A job taken from the queue that did not fit in the previous batch: it starts the next.
    let mut carry: Option<Job> = None;
    loop {
        let mut jobs = Vec::new();
        {
            let rx = rx.lock().unwrap();
            let first = match carry.take() {
                Some(j) => j,
                None => match rx.recv() {
                    Ok(j) => j,
                    Err(_) => return,
                },
            };
            let mut n = first.texts.len();
            jobs.push(first);
            while n < max_batch {
                match rx.try_recv() {
                    Ok(j) if n + j.texts.len() <= max_batch => {
                        n += j.texts.len();
                        jobs.push(j);
                    }
                    Ok(j) => {
                        carry = Some(j);
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        run(&emb, jobs);
    }
}

fn run(emb: &Embedder, jobs: Vec<Job>) {
    if jobs.is_empty() {
        return;
    }
    let texts: Vec<String> = jobs.iter().flat_map(|j| j.texts.iter().cloned()).collect();
    match emb.embed(&texts) {
        Ok(all) => {
            // Split the rows back, in order.
            let mut rest = all.into_iter();
            for j in jobs {
                let mine: Vec<Vec<f32>> = rest.by_ref().take(j.texts.len()).collect();
                let _ = j.reply.send(Ok(mine));
            }
        }
        Err(e) => {
            let msg = e.to_string();
            for j in jobs {
                let _ = j.reply.send(Err(msg.clone()));
            }
        }
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: serve MODEL.onnx [--addr HOST:PORT] [--tokenizer PATH] [--backend CONFIG] [--workers N] \
         [--max-batch N] [--max-texts N] [--seq-buckets LIST] [--batch-buckets LIST]"
    );
    std::process::exit(2)
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let mut model: Option<PathBuf> = None;
    let mut tokenizer: Option<PathBuf> = None;
    let mut addr: SocketAddr = "127.0.0.1:8080".parse()?;
    let mut workers = 1usize;
    let mut max_batch = 32usize;
    let mut max_texts = 256usize;
    let mut opts = EmbedderOptions::default();
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--addr" => addr = value().parse()?,
            "--tokenizer" => tokenizer = Some(value().into()),
            "--backend" => opts.backend = value(),
            "--workers" => workers = value().parse()?,
            "--max-batch" => max_batch = value().parse()?,
            "--max-texts" => max_texts = value().parse()?,
            "--seq-buckets" => opts.seq_buckets = parse_sizes(&value())?,
            "--batch-buckets" => opts.batch_buckets = parse_sizes(&value())?,
            "-h" | "--help" => usage(),
            s if s.starts_with("--") => usage(),
            _ if model.is_none() => model = Some(a.into()),
            _ => usage(),
        }
    }
    let model = model.unwrap_or_else(|| usage());
    if workers == 0 || max_batch == 0 {
        return Err("--workers and --max-batch must be positive".into());
    }
    let tok = tokenizer_path(&model, tokenizer.as_deref());

    let t = Instant::now();
    let emb = Arc::new(Embedder::new(&model, &tok, opts)?);
    eprintln!("backend: {}", emb.backend_description());
    let compile_s = emb.precompile()?;
    let shapes = emb.compile_log().len();
    eprintln!(
        "compiled {shapes} shapes (batch {:?} x sequence {:?}) in {compile_s:.1}s; ready after {:.1}s",
        emb.options().batch_buckets,
        emb.options().seq_buckets,
        t.elapsed().as_secs_f64()
    );
    let health = serde_json::json!({
        "pid": std::process::id(),
        "backend": emb.backend_description(),
        "dim": emb.dim()?,
        "compiled_shapes": shapes,
        "workers": workers,
        "max_batch": max_batch,
    });

    let (tx, rx) = mpsc::sync_channel::<Job>(1024);
    let rx = Arc::new(std::sync::Mutex::new(rx));
    let handles: Vec<_> = (0..workers)
        .map(|i| {
            let (emb, rx) = (emb.clone(), rx.clone());
            std::thread::Builder::new().name(format!("embed-worker-{i}")).spawn(move || worker(emb, rx, max_batch))
        })
        .collect::<Result<_, _>>()?;

    let state = Arc::new(AppState { queue: tx, max_texts, health });
    let app = Router::new()
        .route("/embed", post(embed))
        .route("/health", get(get_health))
        // 256 texts of up to a few KiB each.
        .layer(axum::extract::DefaultBodyLimit::max(8 << 20))
        .with_state(state);

    // Two runtime threads are plenty: requests only parse, queue and serialise.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("listening on http://{}", listener.local_addr()?);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
                eprintln!("shutting down");
            })
            .await?;
        Res::Ok(())
    })?;
    // The router (and its queue sender) is dropped: the workers see the queue close.
    drop(rt);
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}
