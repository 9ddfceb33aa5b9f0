//! A real git server on 127.0.0.1 for the git sources' tests (SPEC §20.3): a repository
//! the test commits to with the `git` program, served by `git daemon` (git://) or by
//! `git http-backend` behind `git_http.py`, which asks for a token (smart HTTP), and a
//! listener that accepts and never answers (a stalled server).

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// Runs git in `dir`, isolated from the machine's configuration; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("git prints text").trim().to_owned()
}

/// A bare repository `estate.git` under a root the servers serve, and a clone the test
/// commits in and pushes from, on branch `main`.
pub struct Repo {
    dir: TempDir,
}

impl Repo {
    pub fn new() -> Repo {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir_all(dir.path().join("repos")).unwrap();
        git(&dir.path().join("repos"), &["init", "-q", "--bare", "-b", "main", "estate.git"]);
        git(dir.path(), &["init", "-q", "-b", "main", "work"]);
        let repo = Repo { dir };
        git(&repo.work(), &["remote", "add", "origin", repo.bare().to_str().unwrap()]);
        repo
    }

    /// The directory the servers serve: `estate.git` in it.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("repos")
    }

    pub fn bare(&self) -> PathBuf {
        self.root().join("estate.git")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Writes `files` (a `None` text removes the file), commits and pushes; the commit.
    pub fn commit(&self, files: &[(&str, Option<&str>)], flags: &[&str]) -> String {
        for (path, text) in files {
            let file = self.work().join(path);
            match text {
                Some(text) => {
                    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                    std::fs::write(&file, text).unwrap();
                }
                None => std::fs::remove_file(&file).unwrap(),
            }
        }
        git(&self.work(), &["add", "-A"]);
        let mut args = vec!["commit", "-q", "--allow-empty", "-m", "change"];
        args.extend_from_slice(flags);
        git(&self.work(), &args);
        git(&self.work(), &["push", "-q", "--force", "origin", "HEAD:main"]);
        git(&self.work(), &["rev-parse", "HEAD"])
    }

    /// Signs the commits given `--gpg-sign=KEYFILE` with that SSH key.
    pub fn sign_with_ssh(&self) {
        git(&self.work(), &["config", "gpg.format", "ssh"]);
    }

    /// Starts the branch over with a commit of `files` that shares no history with what
    /// it held, force-pushed; the commit.
    pub fn force_push(&self, files: &[(&str, Option<&str>)]) -> String {
        git(&self.work(), &["checkout", "-q", "--orphan", "rewritten"]);
        git(&self.work(), &["rm", "-q", "-r", "--cached", "."]);
        self.commit(files, &[])
    }
}

/// `git daemon` serving a repository root on 127.0.0.1.
pub struct Daemon {
    child: Child,
    pub port: u16,
}

impl Daemon {
    pub fn serve(root: &Path) -> Daemon {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // `git daemon` would run `git-daemon` as a child of its own, which a kill of the
        // process started here leaves running: start it directly.
        let daemon = Path::new(&git(root, &["--exec-path"])).join("git-daemon");
        let child = Command::new(daemon)
            .args(["--reuseaddr", "--export-all", "--listen=127.0.0.1", &format!("--port={port}")])
            .arg(format!("--base-path={}", root.display()))
            .arg(root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        let ready = crate::support::eventually(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(ready, "git daemon listens on {port}");
        Daemon { child, port }
    }

    /// The URL of `estate.git`.
    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/estate.git", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// git's smart HTTP behind a token (`git_http.py`).
pub struct Http {
    child: Child,
    port: u16,
    root: PathBuf,
}

impl Http {
    pub fn serve(root: &Path, username: &str, token: &str) -> Http {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/e2e/support/git_http.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args([root.to_str().unwrap(), username, token])
            .stdout(Stdio::piped())
            .spawn()
            .expect("the git HTTP server starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().expect("the server prints its port");
        Http { child, port, root: root.to_owned() }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/estate.git", self.port)
    }

    /// Each request's `METHOD PATH STATUS`, as the server logged it.
    pub fn requests(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.root.join("requests.log")).unwrap_or_default();
        log.lines().map(str::to_owned).collect()
    }

    /// Holds every request from now on, until [`Http::release`].
    pub fn hold(&self) {
        std::fs::write(self.root.join("gate"), "").unwrap();
    }

    pub fn release(&self) {
        std::fs::remove_file(self.root.join("gate")).unwrap();
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server that accepts connections and never answers.
pub struct Stalled {
    _listener: TcpListener,
    pub port: u16,
}

impl Stalled {
    pub fn start() -> Stalled {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        Stalled { _listener: listener, port }
    }
}
