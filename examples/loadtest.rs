//! Load test for examples/serve.rs: throughput and latency at several client counts, every
//! response checked against known-good embeddings, and the server's memory sampled throughout.
//!
//! ```text
//! cargo run --release --example embed -- MODEL.onnx --file examples/support/sentences.txt --json ref.json
//! cargo run --release --example serve -- MODEL.onnx &
//! cargo run --release --example loadtest -- --reference ref.json \
//!     [--url http://127.0.0.1:8080] [--clients 1,8,64] [--seconds 20] [--texts 1-4] \
//!     [--pid PID] [--min-cosine 0.9999] [--json results.json]
//! ```
//!
//! Each client is a task with its own keep-alive HTTP/1.1 connection that sends
//! `POST /embed {"texts": [...]}` back to back for `--seconds` (after a 2 s warm-up at the first
//! level): each request carries a random number of texts in `--texts` (a range `a-b` or a number),
//! drawn at random from the reference sentences. A response is *correct* when its status is 200,
//! it holds one embedding per text, and each has cosine ≥ `--min-cosine` with the reference
//! embedding of its text (from examples/embed.rs `--json`, itself checked against
//! sentence-transformers by tools/embed-check.py). Any other outcome — a connection error, a
//! non-200 status, a missing or wrong embedding — is counted and makes the exit status 1.
//!
//! The server's RSS is read from /proc/PID/status (VmRSS, VmHWM) every 100 ms; the pid comes from
//! `GET /health` unless `--pid` is given (the server must run on this machine).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Reference {
    sentences: Vec<String>,
    embeddings: HashMap<String, Vec<f32>>,
}

#[derive(Default)]
struct ClientResult {
    latencies: Vec<f64>,
    requests: u64,
    sentences: u64,
    errors: u64,
    wrong: u64,
    min_cosine: f64,
    first_error: Option<String>,
}

/// SplitMix64: a deterministic stream per client (seeded by its id), no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (self.0 ^ (self.0 >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum();
    let na: f64 = a.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    dot / (na * nb).max(1e-30)
}

async fn connect(addr: SocketAddr) -> Res<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn get_json(addr: SocketAddr, path: &str) -> Res<serde_json::Value> {
    let mut s = connect(addr).await?;
    let req = Request::get(path).header("host", addr.to_string()).body(Full::new(Bytes::new()))?;
    let resp = s.send_request(req).await?;
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(serde_json::from_slice(&body)?)
}

/// One client: requests back to back until `stop`, recording latencies from `measure` on.
#[allow(clippy::too_many_arguments)]
async fn client(
    id: u64,
    addr: SocketAddr,
    reference: Arc<Reference>,
    texts: (usize, usize),
    min_cos: f64,
    measure: Instant,
    stop: Instant,
    failed: Arc<AtomicBool>,
) -> ClientResult {
    let mut r = ClientResult { min_cosine: 1.0, ..ClientResult::default() };
    let mut rng = Rng(id);
    let mut sender = None;
    let host = addr.to_string();
    while Instant::now() < stop {
        if sender.is_none() {
            match connect(addr).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    r.errors += 1;
                    r.first_error.get_or_insert(format!("connect: {e}"));
                    failed.store(true, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let s = sender.as_mut().unwrap();
        let n = texts.0 + rng.below(texts.1 - texts.0 + 1);
        let batch: Vec<&String> = (0..n).map(|_| &reference.sentences[rng.below(reference.sentences.len())]).collect();
        let body = serde_json::to_vec(&serde_json::json!({ "texts": batch })).unwrap();
        let req = Request::post("/embed")
            .header("host", &host)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let t = Instant::now();
        let outcome: Res<Vec<Vec<f32>>> = async {
            s.ready().await?;
            let resp = s.send_request(req).await?;
            let status = resp.status();
            let bytes = resp.into_body().collect().await?.to_bytes();
            if !status.is_success() {
                return Err(format!("status {status}: {}", String::from_utf8_lossy(&bytes)).into());
            }
            let v: serde_json::Value = serde_json::from_slice(&bytes)?;
            Ok(serde_json::from_value(v["embeddings"].clone())?)
        }
        .await;
        let latency = t.elapsed().as_secs_f64();
        let counted = t >= measure;
        match outcome {
            Err(e) => {
                r.errors += 1;
                r.first_error.get_or_insert(e.to_string());
                failed.store(true, Ordering::Relaxed);
                sender = None; // reconnect
            }
            Ok(embs) => {
                let mut ok = embs.len() == batch.len();
                for (text, e) in batch.iter().zip(&embs) {
                    let c = cosine(e, &reference.embeddings[*text]);
                    r.min_cosine = r.min_cosine.min(c);
                    ok &= c >= min_cos && e.len() == reference.embeddings[*text].len();
                }
                if !ok {
                    r.wrong += 1;
                    r.first_error.get_or_insert(format!("wrong response for {} texts", batch.len()));
                    failed.store(true, Ordering::Relaxed);
                } else if counted {
                    r.requests += 1;
                    r.sentences += batch.len() as u64;
                    r.latencies.push(latency);
                }
            }
        }
    }
    r
}

fn read_status(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn usage() -> ! {
    eprintln!(
        "usage: loadtest --reference REF.json [--url http://HOST:PORT] [--clients 1,8,64] [--seconds S] \
         [--texts A-B] [--pid PID] [--min-cosine C] [--json OUT]"
    );
    std::process::exit(2)
}

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let mut url = "http://127.0.0.1:8080".to_string();
    let mut reference_path: Option<String> = None;
    let mut clients = vec![1usize, 8, 64];
    let mut seconds = 20.0f64;
    let mut texts = (1usize, 4usize);
    let mut pid: Option<u32> = None;
    let mut min_cos = 0.9999f64;
    let mut json_out: Option<String> = None;
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--url" => url = value(),
            "--reference" => reference_path = Some(value()),
            "--clients" => clients = value().split(',').map(|s| s.trim().parse()).collect::<Result<_, _>>()?,
            "--seconds" => seconds = value().parse()?,
            "--texts" => {
                let v = value();
                texts = match v.split_once('-') {
                    Some((a, b)) => (a.parse()?, b.parse()?),
                    None => (v.parse()?, v.parse()?),
                };
            }
            "--pid" => pid = Some(value().parse()?),
            "--min-cosine" => min_cos = value().parse()?,
            "--json" => json_out = Some(value()),
            _ => usage(),
        }
    }
    if texts.0 == 0 || texts.1 < texts.0 || clients.contains(&0) {
        usage();
    }
    let reference_path = reference_path.unwrap_or_else(|| usage());
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&reference_path)?)?;
    let sentences: Vec<String> = serde_json::from_value(doc["sentences"].clone())?;
    let embeddings: Vec<Vec<f32>> = serde_json::from_value(doc["embeddings"].clone())?;
    if sentences.is_empty() || sentences.len() != embeddings.len() {
        return Err(format!("{reference_path}: needs as many sentences as embeddings").into());
    }
    let reference = Arc::new(Reference {
        embeddings: sentences.iter().cloned().zip(embeddings).collect(),
        sentences: {
            let mut s = sentences;
            s.dedup();
            s
        },
    });
    let hostport = url.trim_start_matches("http://").trim_end_matches('/');
    let addr: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(hostport)?.next().ok_or("no address")?;

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let health = get_json(addr, "/health").await?;
        let pid = match pid {
            Some(p) => p,
            None => health["pid"].as_u64().ok_or("GET /health has no pid; pass --pid")? as u32,
        };
        eprintln!("server: {health}");
        let start_mem = read_status(pid).ok_or(format!("cannot read /proc/{pid}/status"))?;
        eprintln!("server pid {pid}: VmRSS {} MiB, VmHWM {} MiB at start", start_mem.0 / 1024, start_mem.1 / 1024);

        // RSS sampler.
        let sampling = Arc::new(AtomicBool::new(true));
        let t0 = Instant::now();
        let sampler = {
            let sampling = sampling.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while sampling.load(Ordering::Relaxed) {
                    if let Some((rss, hwm)) = read_status(pid) {
                        samples.push((t0.elapsed().as_secs_f64(), rss, hwm));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                samples
            })
        };

        let failed = Arc::new(AtomicBool::new(false));
        let mut rows = Vec::new();
        let mut level_marks = Vec::new();
        for (li, &c) in clients.iter().enumerate() {
            let warmup = if li == 0 { 2.0 } else { 0.5 };
            let begin = Instant::now();
            let measure = begin + Duration::from_secs_f64(warmup);
            let stop = measure + Duration::from_secs_f64(seconds);
            let tasks: Vec<_> = (0..c)
                .map(|i| {
                    tokio::spawn(client(
                        (li * 1000 + i) as u64,
                        addr,
                        reference.clone(),
                        texts,
                        min_cos,
                        measure,
                        stop,
                        failed.clone(),
                    ))
                })
                .collect();
            let mut all = ClientResult { min_cosine: 1.0, ..ClientResult::default() };
            for t in tasks {
                let r = t.await?;
                all.latencies.extend(r.latencies);
                all.requests += r.requests;
                all.sentences += r.sentences;
                all.errors += r.errors;
                all.wrong += r.wrong;
                all.min_cosine = all.min_cosine.min(r.min_cosine);
                if all.first_error.is_none() {
                    all.first_error = r.first_error;
                }
            }
            // Requests still in flight at `stop` finish after it: divide by the real span.
            let span = measure.elapsed().as_secs_f64();
            all.latencies.sort_by(f64::total_cmp);
            let mem = read_status(pid).unwrap_or((0, 0));
            let row = serde_json::json!({
                "clients": c,
                "seconds": span,
                "requests": all.requests,
                "sentences": all.sentences,
                "requests_per_s": all.requests as f64 / span,
                "sentences_per_s": all.sentences as f64 / span,
                "p50_ms": percentile(&all.latencies, 50.0) * 1e3,
                "p99_ms": percentile(&all.latencies, 99.0) * 1e3,
                "max_ms": all.latencies.last().copied().unwrap_or(f64::NAN) * 1e3,
                "errors": all.errors,
                "wrong": all.wrong,
                "min_cosine": all.min_cosine,
                "rss_mib_after": mem.0 as f64 / 1024.0,
            });
            eprintln!("{row}");
            if let Some(e) = &all.first_error {
                eprintln!("  first error: {e}");
            }
            level_marks.push((c, t0.elapsed().as_secs_f64()));
            rows.push(row);
        }
        sampling.store(false, Ordering::Relaxed);
        let samples = sampler.await?;
        let end_mem = read_status(pid).unwrap_or((0, 0));
        let peak_rss = samples.iter().map(|s| s.1).max().unwrap_or(0);

        println!("| clients | requests/s | sentences/s | p50 ms | p99 ms | max ms | requests | errors | wrong | min cosine |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} | {} | {} | {:.7} |",
                r["clients"],
                r["requests_per_s"].as_f64().unwrap(),
                r["sentences_per_s"].as_f64().unwrap(),
                r["p50_ms"].as_f64().unwrap(),
                r["p99_ms"].as_f64().unwrap(),
                r["max_ms"].as_f64().unwrap(),
                r["requests"],
                r["errors"],
                r["wrong"],
                r["min_cosine"].as_f64().unwrap(),
            );
        }
        println!();
        println!(
            "server RSS (MiB): start {:.1}, end {:.1}, peak sampled {:.1}; VmHWM start {:.1}, end {:.1}; {} samples over {:.0} s",
            start_mem.0 as f64 / 1024.0,
            end_mem.0 as f64 / 1024.0,
            peak_rss as f64 / 1024.0,
            start_mem.1 as f64 / 1024.0,
            end_mem.1 as f64 / 1024.0,
            samples.len(),
            t0.elapsed().as_secs_f64()
        );
        // RSS at the end of each level (flat memory: these stay put).
        let mut line = String::from("RSS at the end of each level (MiB):");
        for (c, t) in &level_marks {
            let rss = samples.iter().rev().find(|s| s.0 <= *t).map_or(0, |s| s.1);
            line += &format!(" {c} clients {:.1};", rss as f64 / 1024.0);
        }
        println!("{line}");

        if let Some(path) = json_out {
            let doc = serde_json::json!({
                "url": url,
                "texts_per_request": [texts.0, texts.1],
                "levels": rows,
                "rss_kib_samples": samples.iter().map(|s| [s.0, s.1 as f64]).collect::<Vec<_>>(),
                "rss_kib": { "start": start_mem.0, "end": end_mem.0, "peak": peak_rss },
                "hwm_kib": { "start": start_mem.1, "end": end_mem.1 },
            });
            std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
        }
        if failed.load(Ordering::Relaxed) {
            return Err("some requests failed or were wrong (see above)".into());
        }
        Res::Ok(())
    })
}
