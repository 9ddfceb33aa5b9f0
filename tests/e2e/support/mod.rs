//! Starts the real `fleet` binary on a loopback port with a database of its own, and
//! talks to it over HTTP. The suite is built twice from these files: as `e2e`, every
//! server has a SQLite file in its temp dir; as `e2e-postgres`, a database of its own
//! on a throwaway PostgreSQL cluster (`cluster.rs`).

pub mod cluster;
pub mod edge_host;
pub mod git;
pub mod raw;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

pub const FLEET: &str = env!("CARGO_BIN_EXE_fleet");
pub const ALL: &str = "compute:*:* @ *";

/// Polls `done` every 50 ms until it holds or `limit` passes; says whether it held. A
/// test waits with it for what it awaits, never for a fixed time, and asserts on the
/// answer, saying what it waited for.
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Whether this run of the suite is the PostgreSQL one.
pub fn postgres() -> bool {
    env!("CARGO_CRATE_NAME") == "e2e_postgres"
}

/// The database of a server's directory, as its `--db`: the directory's SQLite file, or
/// the PostgreSQL database made for the directory on its first start (its URL is kept
/// in the directory, so that a restart finds it).
pub fn database_of(dir: &Path) -> PathBuf {
    if !postgres() {
        return dir.join("fleet.db");
    }
    let kept = dir.join("postgres-url");
    let url = std::fs::read_to_string(&kept).unwrap_or_else(|_| {
        let url = crate::support::cluster::new_database();
        std::fs::write(&kept, &url).expect("the URL is kept");
        url
    });
    PathBuf::from(url)
}

/// Plain SQL on a server's database, beside the server: what another process or an
/// operator with `psql` could do.
pub enum Sql {
    Sqlite(rusqlite::Connection),
    Postgres(postgres::Client),
}

impl Sql {
    pub fn open(db: &Path) -> Sql {
        let name = db.to_str().unwrap();
        match name.starts_with("postgres://") {
            true => Sql::Postgres(crate::support::cluster::connect(name)),
            false => Sql::Sqlite(rusqlite::Connection::open(db).unwrap()),
        }
    }

    /// Runs statements without results.
    pub fn run(&mut self, sql: &str) {
        match self {
            Sql::Sqlite(db) => db.execute_batch(sql).unwrap(),
            Sql::Postgres(db) => db.batch_execute(sql).unwrap(),
        }
    }

    /// A query's one integer.
    pub fn number(&mut self, sql: &str) -> i64 {
        match self {
            Sql::Sqlite(db) => db.query_row(sql, [], |row| row.get(0)).unwrap(),
            Sql::Postgres(db) => db.query_one(sql, &[]).unwrap().get(0),
        }
    }

    /// A query's one text, or none.
    pub fn text(&mut self, sql: &str) -> Option<String> {
        match self {
            Sql::Sqlite(db) => {
                use rusqlite::OptionalExtension as _;
                db.query_row(sql, [], |row| row.get(0)).optional().unwrap()
            }
            Sql::Postgres(db) => db.query_opt(sql, &[]).unwrap().map(|row| row.get(0)),
        }
    }
}

pub struct Server {
    child: Child,
    pub base: String,
    pub dir: TempDir,
    /// Its `--db`.
    db: PathBuf,
    http: reqwest::blocking::Client,
    /// What the server printed on stdout before it listened (e.g. the demo token).
    pub banner: Vec<String>,
}

/// How to start a server beyond its flags.
#[derive(Default)]
pub struct Launch {
    /// `ulimit -n`: the most file descriptors the server may hold.
    pub open_files: Option<u32>,
    /// Where its stderr goes (else to the test's).
    pub stderr: Option<PathBuf>,
    /// Environment variables set for it (after the harness's own).
    pub env: Vec<(&'static str, &'static str)>,
    /// Another database than the directory's own (a second server on one database).
    pub db: Option<PathBuf>,
}

impl Server {
    /// `fleet serve` with extra flags, on an ephemeral port.
    pub fn start(flags: &[&str]) -> Server {
        Server::start_in(tempfile::tempdir().expect("a temp dir"), flags)
    }

    /// Starts on an existing directory (a restart keeps the database).
    pub fn start_in(dir: TempDir, flags: &[&str]) -> Server {
        Server::launch(dir, flags, &Launch::default())
    }

    /// Starts as `launch` says: under a file-descriptor limit, with stderr kept in a file.
    pub fn launch(dir: TempDir, flags: &[&str], launch: &Launch) -> Server {
        let mut command = match launch.open_files {
            // The shell's `ulimit` lowers the limit, then execs the server under it.
            Some(limit) => {
                let mut command = Command::new("sh");
                command.args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\""), FLEET]);
                command
            }
            None => Command::new(FLEET),
        };
        command
            .arg("--db")
            .arg(launch.db.clone().unwrap_or_else(|| database_of(dir.path())))
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(flags)
            .env("RUST_LOG", "fleet=warn")
            .envs(launch.env.iter().copied())
            .stdout(Stdio::piped());
        match &launch.stderr {
            Some(path) => command.stderr(std::fs::File::create(path).expect("a log file")),
            None => command.stderr(Stdio::inherit()),
        };
        let mut child = command.spawn().expect("fleet starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let mut banner = Vec::new();
        let base = loop {
            let line = lines.next().expect("fleet prints its address before exiting").expect("stdout is text");
            if let Some(address) = line.strip_prefix("fleet listening on ") {
                break address.trim().to_owned();
            }
            banner.push(line);
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).build().expect("a client");
        let db = launch.db.clone().unwrap_or_else(|| database_of(dir.path()));
        Server { child, base, dir, db, http, banner }
    }

    /// How the server exited, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("the server's status")
    }

    /// The `host:port` the server listens on.
    pub fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    /// Its database, as `--db` names it: a file or a `postgres://` URL.
    pub fn db_path(&self) -> PathBuf {
        self.db.clone()
    }

    /// Plain SQL on its database.
    pub fn sql(&self) -> Sql {
        Sql::open(&self.db)
    }

    /// Whether a write transaction has held the server's database for `at_least` (as a
    /// long apply in flight does): on SQLite, its one write lock is taken now and still
    /// `at_least` later; on PostgreSQL, a tenant's write lock (an advisory lock) is held
    /// by a transaction begun `at_least` ago or more.
    pub fn writing_for(&self, at_least: Duration) -> bool {
        match self.sql() {
            Sql::Sqlite(db) => {
                db.busy_timeout(Duration::ZERO).unwrap();
                let held = || match db.execute_batch("BEGIN IMMEDIATE; ROLLBACK") {
                    Ok(()) => false,
                    Err(error) if error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => true,
                    Err(error) => panic!("the write lock could not be tried: {error}"),
                };
                held() && {
                    std::thread::sleep(at_least);
                    held()
                }
            }
            Sql::Postgres(mut db) => {
                let sql = format!(
                    "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                     WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()
                       AND a.xact_start <= now() - interval '{} milliseconds'",
                    at_least.as_millis()
                );
                db.query_one(sql.as_str(), &[]).unwrap().get::<_, i64>(0) > 0
            }
        }
    }

    /// Runs `fleet admin ...` on this server's database and returns stdout.
    pub fn admin(&self, args: &[&str]) -> String {
        admin(&self.db_path(), args)
    }

    pub fn tenant(&self, tenant: &str) {
        self.admin(&["tenant", "create", tenant]);
    }

    /// A new token; `grants` like `compute:fleet:admin @ compute-fleet`.
    pub fn token(&self, tenant: &str, principal: &str, grants: &[&str]) -> String {
        let mut args = vec!["token", "create", "--tenant", tenant, "--principal", principal];
        for grant in grants {
            args.extend(["--grant", grant]);
        }
        self.admin(&args).lines().last().expect("a token line").trim().to_owned()
    }

    /// A fresh tenant with an all-powerful token.
    pub fn tenant_with_token(&self, tenant: &str) -> String {
        self.tenant(tenant);
        self.token(tenant, "alice", &[ALL])
    }

    /// POSTs a raw body to a path; returns the status and the JSON body.
    pub fn raw(&self, token: Option<&str>, path: &str, body: impl Into<reqwest::blocking::Body>) -> (u16, Value) {
        let mut request = self.http.post(format!("{}{path}", self.base)).body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().expect("a body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// Calls `compute.<group>.<method>`, e.g. `call(token, "pools/create", json!({...}))`.
    pub fn call(&self, token: &str, method: &str, body: Value) -> (u16, Value) {
        self.raw(Some(token), &format!("/api/compute/{method}"), body.to_string())
    }

    /// Like `call`, the answer as the text the server sent.
    pub fn call_text(&self, token: &str, method: &str, body: Value) -> (u16, String) {
        let request = self.http.post(format!("{}/api/compute/{method}", self.base)).body(body.to_string());
        let response = request.bearer_auth(token).send().expect("the server answers");
        (response.status().as_u16(), response.text().expect("a body"))
    }

    /// Like `call`, and expects success.
    pub fn ok(&self, token: &str, method: &str, body: Value) -> Value {
        let (status, value) = self.call(token, method, body);
        assert_eq!(status, 200, "{method} failed: {value}");
        value
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        let response = self.http.get(format!("{}{path}", self.base)).send().expect("the server answers");
        (response.status().as_u16(), response.text().expect("a body"))
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the server and returns its directory for a restart.
    pub fn stop(mut self) -> TempDir {
        self.kill();
        let dir = tempfile::tempdir().expect("a temp dir");
        std::mem::replace(&mut self.dir, dir)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn admin(db: &Path, args: &[&str]) -> String {
    let output = Command::new(FLEET).arg("--db").arg(db).arg("admin").args(args).output().expect("fleet admin runs");
    assert!(output.status.success(), "fleet admin {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("stdout is text")
}

/// The error code of an error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}

/// The paths of `details.problems`.
pub fn problem_paths(body: &Value) -> Vec<String> {
    body["error"]["details"]["problems"]
        .as_array()
        .map(|problems| {
            problems.iter().map(|problem| problem["path"].as_str().unwrap_or_default().to_owned()).collect()
        })
        .unwrap_or_default()
}
