//! Saves are crash-safe and can run concurrently with drafting, loading and
//! other saves: whatever is under the path is one whole save.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Rng;
use selfspec::{Config, Shared, Speculative, Token};

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn text(rng: &mut Rng, n: usize) -> Vec<Token> {
    (0..n)
        .map(|_| Token::try_from(rng.below(5000)).expect("small"))
        .collect()
}

/// One request: `begin`, a few drafts, `end_request`.
fn request(config: &Config, shared: &Shared, rng: &mut Rng) {
    let t = text(rng, 300);
    let mut spec = Speculative::with_shared(config, shared).unwrap();
    let mut history = t[..100].to_vec();
    spec.begin(&history);
    for &last in &t[100..] {
        let n = selfspec::verify::greedy(spec.draft(&history, last), &[]);
        spec.accept(n);
        history.push(last);
    }
    spec.end_request();
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("selfspec-{name}-{}.mem", std::process::id()))
}

#[test]
fn concurrent_saves_loads_and_drafts_never_fail() {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let path = temp("concurrent");
    shared.save(&path).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut saves, mut loads) = (0, 0);
    std::thread::scope(|s| {
        let savers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0;
                    while Instant::now() < deadline {
                        shared.save(&path).expect("a save fails");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for t in 0..2 {
            let (shared, config) = (&shared, &config);
            s.spawn(move || {
                let mut rng = Rng(50 + t);
                while Instant::now() < deadline {
                    request(config, shared, &mut rng);
                }
            });
        }
        let loader = s.spawn(|| {
            let mut n = 0;
            while Instant::now() < deadline {
                Shared::load(&config, &path).expect("a load fails");
                n += 1;
            }
            n
        });
        saves = savers.into_iter().map(|h| h.join().unwrap()).sum::<usize>();
        loads = loader.join().unwrap();
    });
    println!("{saves} saves and {loads} loads, none failed");
    assert!(saves > 10 && loads > 10);
    // No temporary file is left behind.
    let dir = path.parent().unwrap();
    let stem = path.file_name().unwrap().to_string_lossy().to_string();
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.starts_with(&format!(".{stem}")) && n.ends_with(".tmp")
        })
        .collect();
    assert!(left.is_empty(), "{} temporary files left", left.len());
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_failed_save_names_the_file_that_failed() {
    let shared = Shared::new(&Config::recommended()).unwrap();
    let e = shared.save("/nonexistent-dir/memory.bin").unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("/nonexistent-dir/.memory.bin."),
        "the temporary file: {msg}"
    );
    assert!(msg.contains(".tmp"), "{msg}");
}

#[test]
fn load_or_create_starts_empty_then_warm() {
    let config = Config::recommended();
    let path = temp("first-start");
    std::fs::remove_file(&path).ok();
    let first = Shared::builder()
        .load_or_create(&path)
        .build(&config)
        .unwrap();
    assert_eq!(first.stats().memory_tokens, 0);
    request(&config, &first, &mut Rng(9));
    first.save(&path).unwrap();
    let second = Shared::builder()
        .load_or_create(&path)
        .build(&config)
        .unwrap();
    assert_eq!(second.stats().memory_tokens, 300);
    assert!(Shared::builder()
        .load(temp("missing"))
        .build(&config)
        .is_err());
    std::fs::remove_file(&path).ok();
}

/// The child of the crash test: saves once, then saves in a loop with the
/// memory changing between saves, logging each save's checksum (synced)
/// before it can be renamed into place.
fn child(path: &Path, log: &Path) {
    let config = Config::recommended();
    let shared = Shared::new(&config).unwrap();
    let mut rng = Rng(77);
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    loop {
        request(&config, &shared, &mut rng);
        let bytes = shared.to_bytes();
        writeln!(log, "{:016x}", fnv1a(&bytes)).unwrap();
        log.sync_all().unwrap();
        shared.save(path).unwrap();
        // `save` writes what `to_bytes` gives: nothing changed in between.
    }
}

#[test]
fn a_save_killed_at_any_moment_leaves_a_whole_earlier_save() {
    if let (Ok(path), Ok(log)) = (
        std::env::var("SELFSPEC_CRASH_PATH"),
        std::env::var("SELFSPEC_CRASH_LOG"),
    ) {
        child(Path::new(&path), Path::new(&log));
        return;
    }
    let path = temp("crash");
    let log = temp("crash-log");
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(123);
    let kills = 200;
    for kill in 0..kills {
        // Each child completes a save of its own before it is killed.
        std::fs::remove_file(&path).ok();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "a_save_killed_at_any_moment_leaves_a_whole_earlier_save",
                "--nocapture",
            ])
            .env("SELFSPEC_CRASH_PATH", &path)
            .env("SELFSPEC_CRASH_LOG", &log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Let it complete one save, then kill it at a random moment.
        let started = Instant::now();
        while !path.exists() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("kill {kill}: {e}"));
        Shared::builder()
            .build_from_bytes(&Config::recommended(), "crash", &bytes)
            .unwrap_or_else(|e| panic!("kill {kill}: the file does not load: {e}"));
        let logged = std::fs::read_to_string(&log).unwrap();
        let sum = format!("{:016x}", fnv1a(&bytes));
        assert!(
            logged.lines().any(|l| l == sum),
            "kill {kill}: not one of the child's saves"
        );
    }
    println!("{kills} kills: the file loaded and was one of the saves every time");
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&log).ok();
}
