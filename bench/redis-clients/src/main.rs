//! The ledger's two kinds of Redis work, on three clients (see Cargo.toml):
//!
//! - **batch**: one script call at a time, each setting 4 keys and adding to a sorted set with
//!   an expiry (the shape of the ledger's group commit: one writer thread, one batch in
//!   flight), for `--seconds`;
//! - **reads**: `GET`s from 4 callers at once (the ledger's 4 reader threads), then from 64.
//!
//! Each prints calls per second and p50 / p99 (µs). It starts its own `redis-server` on a free
//! loopback port (nothing persisted, in a directory removed on a return or a panic), stopped when this program
//! ends however it ends: by its `Drop` on a return or a panic, by the kernel (a parent-death
//! signal) on a signal or a kill.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SCRIPT: &str = "for i = 1, 4 do redis.call('SET', KEYS[i], ARGV[1], 'PX', 60000) end \
    redis.call('ZADD', KEYS[5], ARGV[2], ARGV[3]) redis.call('PEXPIRE', KEYS[5], 60000) return 1";

struct Server(Child, u16, std::path::PathBuf);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.2);
    }
}

fn start() -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("redis-clients-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null());
    // SIGKILL for it when this program dies (a signal skips Drop).
    unsafe {
        use std::os::unix::process::CommandExt as _;
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("redis-server on PATH");
    let server = Server(child, port, dir);
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not listen");
}

/// Calls per second and p50 / p99 (µs) of `latencies` (µs) gathered over `elapsed`.
fn report(what: &str, mut latencies: Vec<u64>, elapsed: Duration) {
    latencies.sort_unstable();
    let q = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "{what:<44} {:>9.0} calls/s  p50 {:>5} µs  p99 {:>5} µs",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        q(0.50),
        q(0.99)
    );
}

fn batch_args(i: u64) -> (Vec<String>, Vec<String>) {
    let keys = (0..4).map(|k| format!("b:{}:{k}", i % 1000)).chain(["b:index".into()]).collect();
    let args = vec!["x".repeat(200), i.to_string(), format!("m{}", i % 1000)];
    (keys, args)
}

fn blocking(url: &str, seconds: u64) {
    let client = redis::Client::open(url).unwrap();
    let script = redis::Script::new(SCRIPT);
    let mut con = client.get_connection().unwrap();
    let (began, mut lat, mut i) = (Instant::now(), Vec::new(), 0u64);
    while began.elapsed() < Duration::from_secs(seconds) {
        let (keys, args) = batch_args(i);
        let t = Instant::now();
        let mut inv = script.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        for a in &args {
            inv.arg(a);
        }
        let _: i64 = inv.invoke(&mut con).unwrap();
        lat.push(t.elapsed().as_micros() as u64);
        i += 1;
    }
    report("redis, blocking: batch (1 at a time)", lat, began.elapsed());
    for callers in [4usize, 64] {
        let began = Instant::now();
        let threads: Vec<_> = (0..callers)
            .map(|c| {
                let client = client.clone();
                std::thread::spawn(move || {
                    let mut con = client.get_connection().unwrap();
                    let (mut lat, mut i) = (Vec::new(), 0u64);
                    while began.elapsed() < Duration::from_secs(seconds) {
                        let t = Instant::now();
                        let _: Option<String> = redis::cmd("GET").arg(format!("b:{}:0", (i + c as u64) % 1000)).query(&mut con).unwrap();
                        lat.push(t.elapsed().as_micros() as u64);
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        let lat: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        report(&format!("redis, blocking: reads, {callers} threads"), lat, began.elapsed());
    }
}

async fn multiplexed(url: &str, seconds: u64) {
    let client = redis::Client::open(url).unwrap();
    let script = redis::Script::new(SCRIPT);
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let (began, mut lat, mut i) = (Instant::now(), Vec::new(), 0u64);
    while began.elapsed() < Duration::from_secs(seconds) {
        let (keys, args) = batch_args(i);
        let t = Instant::now();
        let mut inv = script.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        for a in &args {
            inv.arg(a);
        }
        let _: i64 = inv.invoke_async(&mut con).await.unwrap();
        lat.push(t.elapsed().as_micros() as u64);
        i += 1;
    }
    report("redis, tokio multiplexed: batch (1 at a time)", lat, began.elapsed());
    for callers in [4usize, 64] {
        let began = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let mut con = con.clone();
                tokio::spawn(async move {
                    let (mut lat, mut i) = (Vec::new(), 0u64);
                    while began.elapsed() < Duration::from_secs(seconds) {
                        let t = Instant::now();
                        let _: Option<String> = redis::cmd("GET").arg(format!("b:{}:0", (i + c as u64) % 1000)).query_async(&mut con).await.unwrap();
                        lat.push(t.elapsed().as_micros() as u64);
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        report(&format!("redis, tokio multiplexed: reads, {callers} tasks"), lat, began.elapsed());
    }
}

async fn fred_client(url: &str, seconds: u64) {
    use fred::prelude::*;
    let client = Builder::from_config(Config::from_url(url).unwrap()).build().unwrap();
    client.init().await.unwrap();
    let client = Arc::new(client);
    let sha: String = client.script_load(SCRIPT).await.unwrap();
    let (began, mut lat, mut i) = (Instant::now(), Vec::new(), 0u64);
    while began.elapsed() < Duration::from_secs(seconds) {
        let (keys, args) = batch_args(i);
        let t = Instant::now();
        let _: i64 = client.evalsha(sha.as_str(), keys, args).await.unwrap();
        lat.push(t.elapsed().as_micros() as u64);
        i += 1;
    }
    report("fred: batch (1 at a time)", lat, began.elapsed());
    for callers in [4usize, 64] {
        let began = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|c| {
                let client = Arc::clone(&client);
                tokio::spawn(async move {
                    let (mut lat, mut i) = (Vec::new(), 0u64);
                    while began.elapsed() < Duration::from_secs(seconds) {
                        let t = Instant::now();
                        let _: Option<String> = client.get(format!("b:{}:0", (i + c as u64) % 1000)).await.unwrap();
                        lat.push(t.elapsed().as_micros() as u64);
                        i += 1;
                    }
                    lat
                })
            })
            .collect();
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        report(&format!("fred: reads, {callers} tasks"), lat, began.elapsed());
    }
    client.quit().await.unwrap();
}

fn main() {
    let seconds: u64 = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let server = start();
    let url = format!("redis://127.0.0.1:{}/0", server.1);
    blocking(&url, seconds);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(multiplexed(&url, seconds));
    rt.block_on(fred_client(&url, seconds));
    drop(server);
}
