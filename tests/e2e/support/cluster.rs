//! A throwaway PostgreSQL cluster for the suite's `e2e-postgres` run: made with the
//! system's binaries (Debian's `postgresql` package) in a temp dir, listening on a
//! loopback port, run as an unprivileged user when the tests run as root (`initdb`
//! refuses root). A shell that owns the server stops it and removes its directory when
//! this test process ends, however it ends: it waits on a pipe only this process holds.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const USER: &str = "fleet";

pub struct Cluster {
    port: u16,
    /// The CA that signed the server's certificate: it serves TLS too (`postgres.rs`).
    #[allow(dead_code, reason = "the PostgreSQL-only tests use it; the SQLite suite compiles this harness too")]
    ca: PathBuf,
    /// The shell that owns the server; it outlives this process by the moments it
    /// takes to stop the server.
    _guard: std::sync::Mutex<Child>,
    /// Closing it (at exit) stops the server.
    _lifeline: std::sync::Mutex<ChildStdin>,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// A new empty database on the suite's cluster, as a `--db` URL.
pub fn new_database() -> String {
    let cluster = CLUSTER.get_or_init(start);
    let name = format!("fleet_{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    cluster.client("postgres").batch_execute(&format!("CREATE DATABASE {name}")).expect("a database");
    cluster.url(&name)
}

/// The CA file a client verifies the suite's cluster against (`sslrootcert`).
#[allow(dead_code, reason = "the PostgreSQL-only tests use it; the SQLite suite compiles this harness too")]
pub fn ca() -> PathBuf {
    CLUSTER.get_or_init(start).ca.clone()
}

/// A client of the database a `--db` URL names.
pub fn connect(url: &str) -> postgres::Client {
    postgres::Client::connect(url, postgres::NoTls).expect("the test cluster answers")
}

impl Cluster {
    fn url(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    fn client(&self, database: &str) -> postgres::Client {
        connect(&self.url(database))
    }
}

/// The directory of the newest installed PostgreSQL's binaries.
fn binaries() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").exists() && bin.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Without PostgreSQL's binaries the suite cannot run: CI (which installs them) fails,
/// a developer's machine skips the whole `e2e-postgres` run and says so loudly.
fn missing() -> ! {
    let message = "PostgreSQL's server binaries are not installed (no /usr/lib/postgresql/<version>/bin/initdb), \
                   so the end-to-end suite did not run against PostgreSQL.\n\
                   Install them (Debian/Ubuntu: `sudo apt-get install postgresql`) and run `cargo test` again.";
    if std::env::var_os("CI").is_some() {
        panic!("{message}");
    }
    let banner = "=".repeat(78);
    let _ = writeln!(std::io::stderr(), "\n{banner}\nSKIPPED: the e2e-postgres tests.\n{message}\n{banner}\n");
    std::process::exit(0);
}

/// The unprivileged user and group to run PostgreSQL as: ourselves, or `nobody` as root.
fn unprivileged() -> Option<(u32, u32)> {
    let me = std::fs::metadata("/proc/self").expect("procfs");
    (me.uid() == 0).then_some((65534, 65534))
}

fn as_unprivileged(command: &mut Command) -> &mut Command {
    match unprivileged() {
        Some((uid, gid)) => command.uid(uid).gid(gid),
        None => command,
    }
}

/// A new directory for a cluster (in a temp dir named with `prefix`), with an empty
/// `data` inside; both owned by the unprivileged user, `data` private as PostgreSQL
/// wants it.
fn own_dir(prefix: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().expect("a temp dir").keep();
    let data = dir.join("data");
    std::fs::create_dir(&data).expect("the data directory");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("a private data directory");
    if let Some((uid, gid)) = unprivileged() {
        for owned in [&dir, &data] {
            std::os::unix::fs::chown(owned, Some(uid), Some(gid)).expect("chown the cluster's directory");
        }
    }
    dir
}

/// A new cluster's data directory (in a temp dir named with `prefix`, owned by the
/// unprivileged user), in its `data`: the server binaries and the directory.
fn initdb(prefix: &str) -> (PathBuf, PathBuf) {
    let Some(bin) = binaries() else { missing() };
    let dir = own_dir(prefix);
    let mut initdb = Command::new(bin.join("initdb"));
    initdb.args(["-D"]).arg(dir.join("data")).args(["-U", USER, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"]);
    let output = as_unprivileged(&mut initdb).stdout(Stdio::null()).output().expect("initdb runs");
    assert!(output.status.success(), "initdb failed: {}", String::from_utf8_lossy(&output.stderr));
    (bin, dir)
}

fn start() -> Cluster {
    let (bin, dir) = initdb("fleet-pg-");

    // A certificate for 127.0.0.1 and localhost, signed by a CA of the suite's own; the
    // server's key must be its own and private, or PostgreSQL refuses to start.
    let pki = crate::tls::pki(&dir);
    if let Some((uid, gid)) = unprivileged() {
        for owned in [&pki.certificate, &pki.key] {
            std::os::unix::fs::chown(owned, Some(uid), Some(gid)).expect("chown the certificate");
        }
    }
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&pki.key, std::fs::Permissions::from_mode(0o600)).expect("the key is private");
    let port = free_port();
    // The shell starts the server, waits for its stdin to close (this process ended),
    // stops the server fast and removes the cluster. A checkpoint every 128 MB of WAL,
    // not the default 1 GB: each test's `CREATE DATABASE` logs its 7 MB template, and
    // the suite's ~130 of them otherwise kept a gigabyte of WAL on the machine's disk.
    let script = r#"
        "$0/postgres" -D "$1/data" -p "$2" -k "$1" -c listen_addresses=127.0.0.1 -c max_connections=500 \
            -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_wal_size=128MB \
            -c ssl=on -c ssl_cert_file="$1/server.pem" -c ssl_key_file="$1/server.key" >"$1/server.log" 2>&1 &
        server=$!
        cat >/dev/null
        kill -INT "$server"
        wait "$server"
        rm -rf "$1"
    "#;
    let mut guard = Command::new("sh");
    guard.args(["-c", script]).arg(&bin).arg(&dir).arg(port.to_string()).stdin(Stdio::piped());
    let mut child = as_unprivileged(&mut guard).spawn().expect("the cluster starts");
    let lifeline = child.stdin.take().expect("a pipe");
    let cluster = Cluster {
        port,
        ca: pki.ca,
        _guard: std::sync::Mutex::new(child),
        _lifeline: std::sync::Mutex::new(lifeline),
    };
    assert!(
        super::eventually(Duration::from_secs(60), || {
            postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls).is_ok()
        }),
        "PostgreSQL did not start within 60 s: {}",
        std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
    );
    cluster
}

/// A cluster of one test's own, which it can stop and start again (a database that
/// goes away and comes back): `pg_ctl` on a data directory of its own. Dropped, it
/// stops and is removed. Two make a primary and its synchronous standby
/// ([`Restartable::standby_of`]), which a test fails over ([`Restartable::promote`]).
#[allow(dead_code, reason = "the PostgreSQL-only tests use it; the SQLite suite compiles this harness too")]
pub struct Restartable {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

#[allow(dead_code, reason = "the PostgreSQL-only tests use it; the SQLite suite compiles this harness too")]
impl Restartable {
    pub fn new() -> Restartable {
        let (bin, dir) = initdb("fleet-pg-own-");
        let cluster = Restartable { bin, dir, port: free_port() };
        cluster.start();
        cluster.client("postgres").batch_execute("CREATE DATABASE fleet").expect("a database");
        cluster
    }

    /// A streaming standby of `primary` on `port` (a free one when `None`), made as an
    /// operator would: `pg_basebackup -R` of the running primary, then started. It
    /// reads only until promoted.
    pub fn standby_of(primary: &Restartable, port: Option<u16>) -> Restartable {
        let dir = own_dir("fleet-pg-standby-");
        let mut backup = Command::new(primary.bin.join("pg_basebackup"));
        backup.args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", USER, "-X", "stream", "-R"]);
        backup.args(["--no-sync", "--checkpoint=fast", "-D"]).arg(dir.join("data"));
        let output = as_unprivileged(&mut backup).stdout(Stdio::null()).output().expect("pg_basebackup runs");
        assert!(output.status.success(), "pg_basebackup failed: {}", String::from_utf8_lossy(&output.stderr));
        let standby = Restartable { bin: primary.bin.clone(), dir, port: port.unwrap_or_else(free_port) };
        standby.start();
        standby
    }

    /// Makes every commit wait until a standby has it (`synchronous_standby_names`), and
    /// waits until one does: what keeps an acknowledged commit through a failover.
    pub fn require_synchronous_standby(&self) {
        let mut client = self.client("postgres");
        client.batch_execute("ALTER SYSTEM SET synchronous_standby_names = '*'").unwrap();
        client.batch_execute("SELECT pg_reload_conf()").unwrap();
        let synchronous = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'";
        assert!(
            super::eventually(Duration::from_secs(30), || {
                client.query_one(synchronous, &[]).unwrap().get::<_, i64>(0) > 0
            }),
            "no standby became synchronous within 30 s"
        );
    }

    /// Promotes this standby to the primary (`pg_ctl promote`) and waits until it is.
    pub fn promote(&self) {
        self.pg_ctl(&["-w", "promote"]);
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of its database `fleet`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/fleet", self.port)
    }

    fn client(&self, database: &str) -> postgres::Client {
        connect(&format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port))
    }

    /// Runs one of the cluster's own tools (`pg_dump`, `pg_restore`, …) as its user on
    /// `input`, answering its standard output; panics with its error output when it fails.
    pub fn tool(&self, name: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
        let mut command = Command::new(self.bin.join(name));
        command.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", USER]).args(args);
        let mut child = as_unprivileged(&mut command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the tool runs");
        let mut stdin = child.stdin.take().expect("a pipe");
        let input = input.to_owned();
        let feeding = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output().expect("the tool ends");
        feeding.join().expect("the input was written").expect("the tool read its input");
        assert!(output.status.success(), "{name} {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
        output.stdout
    }

    /// A new empty database of this cluster, as a `--db` URL.
    pub fn new_database(&self, name: &str) -> String {
        self.client("postgres").batch_execute(&format!("CREATE DATABASE {name}")).expect("a database");
        format!("postgres://{USER}@127.0.0.1:{}/{name}", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) {
        let mut command = Command::new(self.bin.join("pg_ctl"));
        command.arg("-D").arg(self.dir.join("data")).args(args);
        let output = as_unprivileged(&mut command).stdout(Stdio::null()).output().expect("pg_ctl runs");
        assert!(output.status.success(), "pg_ctl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }

    /// Starts the server and waits until it answers. Commits are synchronous: `stop`
    /// is a crash, and an asynchronous commit still in PostgreSQL's WAL buffers would be
    /// lost by it (the tenant and token a test made a moment before).
    pub fn start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.pg_ctl(&["-w", "-l", &log, "-o", &options, "start"]);
    }

    /// Stops the server at once: connections are cut, transactions in flight abort.
    pub fn stop(&self) {
        self.pg_ctl(&["-w", "-m", "immediate", "stop"]);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Drop for Restartable {
    fn drop(&mut self) {
        let mut command = Command::new(self.bin.join("pg_ctl"));
        command.arg("-D").arg(self.dir.join("data")).args(["-w", "-m", "immediate", "stop"]);
        let _ = as_unprivileged(&mut command).stdout(Stdio::null()).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
