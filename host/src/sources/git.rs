//! Fetching from a source's repository with the `git` program (SPEC §20.3): the branch's
//! head, shallow fetches into a cache repository per source, force-push detection, and
//! the document, commit and history read from that cache.
//!
//! Why the `git` program and not gix: the reach rule must hold on the address actually
//! connected to. We resolve the host ourselves, check every address with
//! [`Reach::admits`] (the rule webhooks use), and pin curl to the checked address with
//! `http.curloptResolve` (a `git://` URL is rewritten to the checked IP literal), so a
//! name that resolves elsewhere a moment later (DNS rebinding) reaches nothing. Redirects
//! are not followed. A URL's host must be written plainly (a DNS name, a dotted IPv4
//! address or a bracketed IPv6 one) so that the name we resolve is the name curl would.
//!
//! What is absent: the host's git configuration (system, global, `$HOME`, `$XDG_CONFIG_HOME`
//! and every `GIT_*` variable of the server's environment), credential helpers, prompts,
//! hooks, remote helpers (`ext::` and every `transport::address` form), automatic gc and
//! maintenance. Every process is started with a cleared environment, in its own process
//! group (killed whole when a bound is passed), with stdin closed. (A `file` URL, for
//! tests and in-house mirrors only, runs `upload-pack` on that repository, which reads
//! the repository's own configuration: the operator's, who admitted it.)
//!
//! Bounds: every public operation has one deadline, [`GitConfig::timeout`] from its start,
//! which covers name resolution, every process it runs and the retry after a damaged
//! cache. While a fetch runs, the size of the cache repository's `objects/` is polled
//! every 100 ms (packs are kept as received, `fetch.unpackLimit=1`, so its growth is the
//! bytes received) and the fetch is killed when it grew by more than
//! [`GitConfig::max_bytes`]; the same bound is checked once more when git exits, and caps
//! every output read (listings, the document's files, a commit). A cache repository over
//! `max_bytes` before an operation is removed and rebuilt (the cache only ever holds
//! what the last few operations fetched), as is one that git reports damaged, or that a
//! killed fetch may have left half-written (locks, temporary packs).

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use data_encoding::{BASE64, HEXLOWER};
use fleet_guest::grammar::quoted;
use ipnet::IpNet;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::reach::Reach;

/// How often a running fetch's disk use is measured.
const POLL: Duration = Duration::from_millis(100);
/// The longest URL accepted.
const MAX_URL: usize = 2048;
/// The most of git's stderr kept (the rest is read and dropped).
const STDERR_KEPT: usize = 16 * 1024;
/// The most characters of git's stderr an error carries.
const MESSAGE_MAX: usize = 600;
/// The most bytes of `ls-remote` output read (one ref is asked for).
const LISTING_MAX: u64 = 1 << 20;
/// How much older than the ancestor a commit between it and the descendant may claim to
/// be (clock skew between committers' machines) and still be fetched by
/// [`Git::descends`].
const SKEW_SECONDS: u64 = 3600;
/// The username sent with a token when the credential names none (GitHub's convention
/// for app and fine-grained tokens; GitLab and Gitea accept any username with a token).
pub const DEFAULT_USERNAME: &str = "x-access-token";
/// What upload-pack says when `--shallow-since` selects no commit at all.
const NOTHING_SINCE: &str = "no commits selected for shallow requests";

/// What the deployment lets sources fetch (`serve --git-*`).
#[derive(Debug, Clone)]
pub struct GitConfig {
    /// The `git` program (`git`, found on the server's `PATH`).
    pub program: PathBuf,
    /// `--git-cache DIR`: a directory this replica owns.
    pub cache: PathBuf,
    /// `--git-timeout` (60 s): the bound of one operation, retries included.
    pub timeout: Duration,
    /// `--git-max-bytes` (256 MiB): the bound of one fetch's bytes and of a document.
    pub max_bytes: u64,
    /// `--git-allow-insecure`: admits `http`, `git` and `file` URLs.
    pub allow_insecure: bool,
    /// `--git-allow CIDR`: networks admitted although not public.
    pub allow: Vec<IpNet>,
}

impl GitConfig {
    /// The defaults of SPEC §20.3 with `cache` as the cache directory.
    pub fn new(cache: PathBuf) -> Self {
        GitConfig {
            program: PathBuf::from("git"),
            cache,
            timeout: Duration::from_secs(60),
            max_bytes: 256 << 20,
            allow_insecure: false,
            allow: Vec::new(),
        }
    }
}

/// A source's credential, sent as an HTTP `Authorization: Basic` header (never on a
/// command line, never in an error). `username` defaults to [`DEFAULT_USERNAME`].
#[derive(Clone)]
pub struct Credential {
    pub username: Option<String>,
    pub token: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Credential").field("username", &self.username).finish_non_exhaustive()
    }
}

impl Credential {
    /// `base64(username:token)`, the header's secret part (base64 holds no line break,
    /// so neither part can add a header of its own).
    fn encoded(&self) -> String {
        let username = self.username.as_deref().unwrap_or(DEFAULT_USERNAME);
        BASE64.encode(format!("{username}:{}", self.token).as_bytes())
    }
}

/// A repository as a source names it.
#[derive(Debug, Clone, Copy)]
pub struct Remote<'a> {
    pub url: &'a str,
    pub credential: Option<&'a Credential>,
}

/// A URL's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Https,
    Http,
    Git,
    File,
}

/// A repository URL whose form [`Git::check_url`] admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitUrl {
    /// The URL as given.
    pub url: String,
    pub scheme: Scheme,
    /// The host as written, without brackets; empty for `file`.
    pub host: String,
    /// The port, written or the scheme's; 0 for `file`.
    pub port: u16,
    /// The path (with a `file` URL, the repository's directory).
    pub path: String,
}

/// The document at a path of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// The object id of the blob or tree: the same id, the same document.
    pub id: String,
    /// A file: its name and text. A directory: every file under it, by relative path,
    /// sorted by path.
    pub files: Vec<(String, String)>,
}

/// Why an operation on a repository did not succeed; one line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitError {
    /// A URL or address the deployment's rules refuse.
    #[error("the repository may not be reached: {0}")]
    Refused(String),
    #[error("the repository cannot be reached: {0}")]
    Unreachable(String),
    #[error("the repository has no branch {0:?}")]
    NoBranch(String),
    /// The server does not have (or no longer serves) the commit.
    #[error("the repository has no commit {0}")]
    NoCommit(String),
    /// The path is in no file or directory of the commit.
    #[error("the commit has no file or directory {0:?}")]
    Missing(String),
    /// A file of the document that is no UTF-8 text, a symbolic link or a submodule.
    #[error("{0}")]
    Unreadable(String),
    /// A commit id, branch or path that is none.
    #[error("{0}")]
    Invalid(String),
    #[error("the fetch or document passed the limit of {limit} bytes (serve --git-max-bytes)")]
    TooLarge { limit: u64 },
    #[error("git did not finish within {} (serve --git-timeout)", humantime::format_duration(*limit))]
    TimedOut { limit: Duration },
    /// The cache repository was damaged; it is removed and the next fetch rebuilds it.
    #[error("the cached repository was damaged and is rebuilt on the next fetch: {0}")]
    Damaged(String),
    /// git's own reason, trimmed and bounded, the credential scrubbed from it.
    #[error("git failed: {0}")]
    Failed(String),
}

/// Fetches and reads repositories within the deployment's bounds. One per replica; the
/// operations on one cache repository (one `key`) run one at a time.
#[derive(Debug)]
pub struct Git {
    config: GitConfig,
    /// An empty directory: git's `$HOME` and `$XDG_CONFIG_HOME`, and the working
    /// directory of every process.
    home: PathBuf,
    reach: Reach,
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// Names resolved without DNS, so that a test can prove curl connects to the
    /// address we checked and not to one it looked up itself.
    #[cfg(test)]
    names: HashMap<String, Vec<IpAddr>>,
}

/// A URL ready to hand to git: its address checked and pinned.
struct Endpoint {
    url: String,
    /// `-c` settings that pin the address (`http.curloptResolve`).
    settings: Vec<String>,
}

/// How much history a fetch asks for.
#[derive(Clone, Copy)]
enum Depth {
    /// The commit alone.
    One,
    /// Every commit the wanted one reaches that is no older than this Unix time.
    Since(u64),
}

/// What one git process left.
struct Output {
    success: bool,
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// What a process may take besides its deadline.
struct Bounds {
    stdin: Option<Vec<u8>>,
    stdout_max: u64,
    /// A fetch: the `objects/` directory and its size before the fetch.
    watch: Option<(PathBuf, u64)>,
    deadline: Instant,
}

impl Git {
    /// Nothing is created until the first operation.
    pub fn new(config: GitConfig) -> Self {
        let cache = std::path::absolute(&config.cache).unwrap_or_else(|_| config.cache.clone());
        let config = GitConfig { cache, ..config };
        Git {
            home: config.cache.join("home"),
            reach: Reach { allow_http: config.allow_insecure, allow: config.allow.clone() },
            config,
            locks: Mutex::default(),
            #[cfg(test)]
            names: HashMap::new(),
        }
    }

    /// Whether `http`, `git` and `file` URLs are admitted (`serve --git-allow-insecure`).
    pub fn allows_insecure(&self) -> bool {
        self.config.allow_insecure
    }

    /// The URL's form, before any name is resolved: `https`, or `http`, `git` and `file`
    /// when the deployment allows insecure URLs; never a remote helper's
    /// `transport::address` (`ext::` runs a command), never credentials in the URL (they
    /// go in the source's credential), a host written plainly (a DNS name, a dotted IPv4
    /// address or a bracketed IPv6 one: `2130706433` or `0177.0.0.1` is refused, so that
    /// what we resolve is what curl connects to), at most 2048 bytes.
    pub fn check_url(&self, url: &str) -> Result<GitUrl, String> {
        if url.len() > MAX_URL {
            return Err(format!("must be at most {MAX_URL} bytes"));
        }
        if let Some((transport, _)) = url.split_once("::")
            && transport.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"+-.".contains(&byte))
        {
            return Err(format!(
                "{} is a remote helper's form (transport::address), which git runs as a program; give an https:// URL",
                quoted(&format!("{transport}::"))
            ));
        }
        if url
            .chars()
            .any(|character| character.is_whitespace() || character.is_control() || "\\?#".contains(character))
        {
            return Err("must not hold spaces, control characters, \\, ? or #".to_owned());
        }
        let (scheme, rest) = url.split_once("://").ok_or("must be an https:// URL")?;
        let scheme = match scheme {
            "https" => Scheme::Https,
            "http" | "git" | "file" if !self.config.allow_insecure => {
                return Err("must be https (serve --git-allow-insecure admits http, git and file URLs)".to_owned());
            }
            "http" => Scheme::Http,
            "git" => Scheme::Git,
            "file" => Scheme::File,
            _ => return Err("must be an https:// URL".to_owned()),
        };
        if scheme == Scheme::File {
            if !rest.starts_with('/') || rest.len() < 2 {
                return Err("a file URL names a directory and no host: file:///path/to/repository".to_owned());
            }
            return Ok(GitUrl { url: url.to_owned(), scheme, host: String::new(), port: 0, path: rest.to_owned() });
        }
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.contains('@') {
            return Err("must not carry credentials; give them as the source's credential".to_owned());
        }
        let path = &rest[authority.len()..];
        if path.len() < 2 {
            return Err("must name a repository: a path after the host".to_owned());
        }
        // The form of host and port is the webhooks' (brackets, ports as written).
        let as_http = format!("{}://{rest}", if scheme == Scheme::Https { "https" } else { "http" });
        let target = Reach { allow_http: true, allow: Vec::new() }.target(&as_http)?;
        let port = match (scheme, target.uri.port()) {
            (Scheme::Git, None) => 9418,
            _ => target.port,
        };
        plain_host(&target.host)?;
        Ok(GitUrl { url: url.to_owned(), scheme, host: target.host, port, path: path.to_owned() })
    }

    /// The URL's form, then every address its host resolves to, by the reach rules of
    /// [`crate::reach`] with `--git-allow`'s networks. Checked when a source is put, and
    /// again before each connection.
    pub async fn check_reach(&self, url: &str) -> Result<(), String> {
        let url = self.check_url(url)?;
        let deadline = Instant::now() + self.config.timeout;
        self.pin(&url, deadline).await.map(|_| ()).map_err(|error| error.to_string())
    }

    /// The commit at the head of `branch` (`git ls-remote`: one round trip, no fetch).
    pub async fn head(&self, remote: &Remote<'_>, branch: &str) -> Result<String, GitError> {
        branch_name(branch)?;
        let deadline = Instant::now() + self.config.timeout;
        let endpoint = self.endpoint(remote, deadline).await?;
        self.directories()?;
        let reference = format!("refs/heads/{branch}");
        let mut command = self.command(None, remote.credential, &endpoint.settings);
        command.args(["ls-remote", "--exit-code", "--refs"]).arg(&endpoint.url).arg(&reference);
        let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
        if output.code == Some(2) {
            return Err(GitError::NoBranch(branch.to_owned()));
        }
        if !output.success {
            return Err(remote_failure(&scrub(&output.stderr, remote.credential)));
        }
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .find(|(_, name)| *name == reference)
            .and_then(|(id, _)| object_id(id).ok().map(str::to_owned))
            .ok_or_else(|| GitError::NoBranch(branch.to_owned()))
    }

    /// Fetches `commit` alone (depth 1) into the cache repository of `key`, unless it is
    /// there already.
    pub async fn fetch(&self, key: &str, remote: &Remote<'_>, commit: &str) -> Result<(), GitError> {
        let commit = object_id(commit)?;
        let deadline = Instant::now() + self.config.timeout;
        let repository = self.repository(key);
        let _turn = self.turn(&repository).await;
        rebuilt_once(&repository, async || self.fetch_once(&repository, remote, commit, deadline).await).await
    }

    async fn fetch_once(
        &self,
        repository: &Path,
        remote: &Remote<'_>,
        commit: &str,
        deadline: Instant,
    ) -> Result<(), GitError> {
        self.prepare(repository, deadline).await?;
        if self.has_commit(repository, commit, deadline).await? {
            return Ok(());
        }
        self.fetch_into(repository, remote, commit, Depth::One, deadline).await
    }

    /// Whether `descendant` descends from `ancestor` (a new head that does not is a force
    /// push). Histories are shallow, so the descendant's history is deepened by date
    /// (`--shallow-since`, one round trip) back to an hour before the ancestor's
    /// committer date, then `git merge-base --is-ancestor` answers. Chosen over
    /// `--deepen` in steps, which needs a round trip per step and no bound but the
    /// root; the cost is that a commit in between dated more than an hour before the
    /// ancestor (a committer's clock that far off) cuts the history there and answers
    /// `false`, which stops the source as diverged until a `sync`: the safe side. An
    /// ancestor the server no longer has (gone with a force push) is no ancestor.
    pub async fn descends(
        &self,
        key: &str,
        remote: &Remote<'_>,
        ancestor: &str,
        descendant: &str,
    ) -> Result<bool, GitError> {
        let (ancestor, descendant) = (object_id(ancestor)?, object_id(descendant)?);
        if ancestor == descendant {
            return Ok(true);
        }
        let deadline = Instant::now() + self.config.timeout;
        let repository = self.repository(key);
        let _turn = self.turn(&repository).await;
        rebuilt_once(&repository, async || {
            self.descends_once(&repository, remote, ancestor, descendant, deadline).await
        })
        .await
    }

    async fn descends_once(
        &self,
        repository: &Path,
        remote: &Remote<'_>,
        ancestor: &str,
        descendant: &str,
        deadline: Instant,
    ) -> Result<bool, GitError> {
        self.prepare(repository, deadline).await?;
        if !self.has_commit(repository, descendant, deadline).await? {
            self.fetch_into(repository, remote, descendant, Depth::One, deadline).await?;
        }
        if !self.has_commit(repository, ancestor, deadline).await? {
            match self.fetch_into(repository, remote, ancestor, Depth::One, deadline).await {
                Err(GitError::NoCommit(_)) => return Ok(false),
                result => result?,
            }
        }
        if self.is_ancestor(repository, ancestor, descendant, deadline).await? {
            return Ok(true);
        }
        let since = self.committer_time(repository, ancestor, deadline).await?.saturating_sub(SKEW_SECONDS);
        match self.fetch_into(repository, remote, descendant, Depth::Since(since), deadline).await {
            // The descendant and everything it reaches are older than the ancestor.
            Err(GitError::Failed(message)) if message.contains(NOTHING_SINCE) => return Ok(false),
            result => result?,
        }
        self.is_ancestor(repository, ancestor, descendant, deadline).await
    }

    /// The document at `path` (`.` is the root) in `commit`, which must have been
    /// fetched: a file as one `(name, text)`, a directory as every file under it. At most
    /// `max_bytes` of files are read; a file that is no UTF-8 text, a symbolic link or a
    /// submodule is an error naming it.
    pub async fn read(&self, key: &str, commit: &str, path: &str) -> Result<Document, GitError> {
        let commit = object_id(commit)?;
        let path = document_path(path)?;
        let deadline = Instant::now() + self.config.timeout;
        let repository = self.repository(key);
        let _turn = self.turn(&repository).await;
        let result = self.read_locked(&repository, commit, path.as_deref(), deadline).await;
        forget_damaged(&repository, result).await
    }

    async fn read_locked(
        &self,
        repository: &Path,
        commit: &str,
        path: Option<&str>,
        deadline: Instant,
    ) -> Result<Document, GitError> {
        self.require_commit(repository, commit, deadline).await?;
        let (id, files) = match path {
            None => {
                let tree = self.rev_parse(repository, &format!("{commit}^{{tree}}"), deadline).await?;
                let files = self.tree_files(repository, &tree, "", deadline).await?;
                (tree, files)
            }
            Some(path) => {
                let entry = self.entry(repository, commit, path, deadline).await?;
                match entry.kind.as_str() {
                    "tree" => {
                        let files = self.tree_files(repository, &entry.id, &format!("{path}/"), deadline).await?;
                        (entry.id, files)
                    }
                    _ => {
                        entry.check()?;
                        let name = path.rsplit('/').next().unwrap_or(path).to_owned();
                        let id = entry.id.clone();
                        (id, vec![(name, entry)])
                    }
                }
            }
        };
        let total = files.iter().map(|(_, entry)| entry.size).fold(0u64, u64::saturating_add);
        if total > self.config.max_bytes {
            return Err(GitError::TooLarge { limit: self.config.max_bytes });
        }
        let texts = self.blobs(repository, &files, total, deadline).await?;
        let mut files: Vec<(String, String)> = files.into_iter().map(|(name, _)| name).zip(texts).collect();
        files.sort_by(|(left, _), (right, _)| left.cmp(right));
        Ok(Document { id, files })
    }

    /// The tree entry at `path` in `commit`.
    async fn entry(&self, repository: &Path, commit: &str, path: &str, deadline: Instant) -> Result<Entry, GitError> {
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["ls-tree", "-z", "-l", "--full-tree", commit, "--", path]);
        let output = self.run(command, Bounds::reading(self.config.max_bytes, deadline)).await?;
        if !output.success {
            return Err(local_failure(&output));
        }
        output
            .stdout
            .split(|byte| *byte == 0)
            .filter_map(Entry::parse)
            .find(|entry| entry.path == path)
            .ok_or_else(|| GitError::Missing(path.to_owned()))
    }

    /// The commit object as `git cat-file commit` prints it (what its signature signs).
    pub async fn raw_commit(&self, key: &str, commit: &str) -> Result<Vec<u8>, GitError> {
        let commit = object_id(commit)?;
        let deadline = Instant::now() + self.config.timeout;
        let repository = self.repository(key);
        let _turn = self.turn(&repository).await;
        let result = async {
            self.require_commit(&repository, commit, deadline).await?;
            let mut command = self.command(Some(&repository), None, &[]);
            command.args(["cat-file", "commit", commit]);
            let output = self.run(command, Bounds::reading(self.config.max_bytes, deadline)).await?;
            if !output.success {
                return Err(local_failure(&output));
            }
            Ok(output.stdout)
        }
        .await;
        forget_damaged(&repository, result).await
    }

    /// The newest commit in `since..head` (all of `head`'s history without `since`) that
    /// changed `path`, when the cache holds the history to tell: `None` when no commit
    /// there changed it, when `since` is not in the cache, or when the commit found is
    /// where the shallow history is cut (it would seem to add every file).
    pub async fn changed_in(
        &self,
        key: &str,
        since: Option<&str>,
        head: &str,
        path: &str,
    ) -> Result<Option<String>, GitError> {
        let head = object_id(head)?;
        let since = since.map(object_id).transpose()?;
        let path = document_path(path)?;
        let deadline = Instant::now() + self.config.timeout;
        let repository = self.repository(key);
        let _turn = self.turn(&repository).await;
        let result = async {
            self.require_commit(&repository, head, deadline).await?;
            let range = match since {
                Some(since) if !self.has_commit(&repository, since, deadline).await? => return Ok(None),
                Some(since) => format!("{since}..{head}"),
                None => head.to_owned(),
            };
            let mut command = self.command(Some(&repository), None, &[]);
            command.args(["log", "-1", "--format=%H", &range, "--", path.as_deref().unwrap_or(".")]);
            let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
            if !output.success {
                return Err(local_failure(&output));
            }
            let found = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            if found.is_empty() {
                return Ok(None);
            }
            let shallow = std::fs::read_to_string(repository.join("shallow")).unwrap_or_default();
            Ok((!shallow.lines().any(|line| line.trim() == found)).then_some(found))
        }
        .await;
        forget_damaged(&repository, result).await
    }
}

/// Checking and pinning addresses.
impl Git {
    /// The remote's URL checked and its address pinned, or why not.
    async fn endpoint(&self, remote: &Remote<'_>, deadline: Instant) -> Result<Endpoint, GitError> {
        let url = self.check_url(remote.url).map_err(GitError::Refused)?;
        self.pin(&url, deadline).await
    }

    /// Every address of the URL's host admitted, and the first one pinned.
    async fn pin(&self, url: &GitUrl, deadline: Instant) -> Result<Endpoint, GitError> {
        if url.scheme == Scheme::File {
            return Ok(Endpoint { url: url.url.clone(), settings: Vec::new() });
        }
        let literal = url.host.parse::<IpAddr>().ok();
        let addresses = match literal {
            Some(address) => vec![address],
            None => self.lookup(&url.host, url.port, deadline).await?,
        };
        let Some(&first) = addresses.first() else {
            return Err(GitError::Unreachable(format!("{} resolves to no address", url.host)));
        };
        if let Some(inside) = addresses.iter().find(|address| !self.reach.admits(**address)) {
            let subject = match literal {
                Some(_) => String::new(),
                None => format!("{} resolves to ", url.host),
            };
            return Err(GitError::Refused(format!(
                "{subject}{inside}, which is not a public address (serve --git-allow admits a network)"
            )));
        }
        let address = match first {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        Ok(match url.scheme {
            Scheme::Git => Endpoint { url: format!("git://{address}:{}{}", url.port, url.path), settings: Vec::new() },
            // curl connects to a literal as written.
            _ if literal.is_some() => Endpoint { url: url.url.clone(), settings: Vec::new() },
            _ => Endpoint {
                url: url.url.clone(),
                settings: vec![format!("http.curloptResolve={}:{}:{address}", url.host.to_ascii_lowercase(), url.port)],
            },
        })
    }

    /// The addresses `host` resolves to now.
    async fn lookup(&self, host: &str, port: u16, deadline: Instant) -> Result<Vec<IpAddr>, GitError> {
        #[cfg(test)]
        if let Some(addresses) = self.names.get(host) {
            return Ok(addresses.clone());
        }
        match tokio::time::timeout_at(deadline, tokio::net::lookup_host((host, port))).await {
            Err(_) => Err(GitError::TimedOut { limit: self.config.timeout }),
            Ok(Err(error)) => Err(GitError::Unreachable(format!("cannot resolve {host}: {error}"))),
            Ok(Ok(addresses)) => Ok(addresses.map(|address| address.ip()).collect()),
        }
    }
}

/// The cache repositories.
impl Git {
    /// The cache repository of `key`: named by the SHA-256 of the key, so any key is a
    /// safe directory name.
    fn repository(&self, key: &str) -> PathBuf {
        let name = HEXLOWER.encode(&Sha256::digest(key.as_bytes()));
        self.config.cache.join("repos").join(format!("{name}.git"))
    }

    /// Waits for the operations already running on `repository` to end.
    async fn turn(&self, repository: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            locks.entry(repository.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }

    fn directories(&self) -> Result<(), GitError> {
        for directory in [&self.home, &self.config.cache.join("repos")] {
            std::fs::create_dir_all(directory).map_err(|error| {
                GitError::Failed(format!("cannot create the cache directory {}: {error}", directory.display()))
            })?;
        }
        Ok(())
    }

    /// An empty bare repository where there is none (or something else), and a fresh one
    /// where the cache has grown past `max_bytes`.
    async fn prepare(&self, repository: &Path, deadline: Instant) -> Result<(), GitError> {
        self.directories()?;
        let objects = repository.join("objects");
        let whole = repository.join("HEAD").is_file() && objects.is_dir();
        if whole && size_of(objects).await <= self.config.max_bytes {
            return Ok(());
        }
        remove(repository).await;
        let mut command = self.command(None, None, &[]);
        command.args(["init", "--bare", "--quiet", "--template="]).arg(repository);
        let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
        if !output.success {
            return Err(GitError::Failed(scrub(&output.stderr, None)));
        }
        Ok(())
    }

    async fn has_commit(&self, repository: &Path, commit: &str, deadline: Instant) -> Result<bool, GitError> {
        if !repository.join("HEAD").exists() {
            return Ok(false);
        }
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["cat-file", "-e", &format!("{commit}^{{commit}}")]);
        let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
        if output.success {
            return Ok(true);
        }
        // Absent, unless git says why it could not tell.
        match local_failure(&output) {
            damaged @ GitError::Damaged(_) => Err(damaged),
            _ => Ok(false),
        }
    }

    async fn require_commit(&self, repository: &Path, commit: &str, deadline: Instant) -> Result<(), GitError> {
        match self.has_commit(repository, commit, deadline).await? {
            true => Ok(()),
            false => Err(GitError::Failed(format!("commit {commit} is not in the cache; fetch it first"))),
        }
    }

    /// Fetches `commit` with `depth` of its history, as `refs/fleet/<commit>` so that
    /// later fetches tell the server what the cache has.
    async fn fetch_into(
        &self,
        repository: &Path,
        remote: &Remote<'_>,
        commit: &str,
        depth: Depth,
        deadline: Instant,
    ) -> Result<(), GitError> {
        let endpoint = self.endpoint(remote, deadline).await?;
        let objects = repository.join("objects");
        let before = size_of(objects.clone()).await;
        let mut command = self.command(Some(repository), remote.credential, &endpoint.settings);
        command.args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-recurse-submodules",
            "--no-write-fetch-head",
            "--no-auto-maintenance",
            "--no-show-forced-updates",
        ]);
        match depth {
            Depth::One => command.arg("--depth=1"),
            Depth::Since(time) => command.arg(format!("--shallow-since=@{time}")),
        };
        command.arg(&endpoint.url).arg(format!("+{commit}:refs/fleet/{commit}"));
        let bounds = Bounds { watch: Some((objects, before)), ..Bounds::reading(LISTING_MAX, deadline) };
        let output = match self.run(command, bounds).await {
            Ok(output) => output,
            Err(error @ (GitError::TooLarge { .. } | GitError::TimedOut { .. })) => {
                // A killed fetch may leave locks and a partial pack behind.
                remove(repository).await;
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        if output.success {
            return Ok(());
        }
        let message = scrub(&output.stderr, remote.credential);
        let lowered = message.to_ascii_lowercase();
        if ["not our ref", "no such remote ref", "couldn't find remote ref"].iter().any(|sign| lowered.contains(sign)) {
            return Err(GitError::NoCommit(commit.to_owned()));
        }
        if damaged(&message) {
            return Err(GitError::Damaged(message));
        }
        Err(remote_failure(&message))
    }

    async fn is_ancestor(
        &self,
        repository: &Path,
        ancestor: &str,
        descendant: &str,
        deadline: Instant,
    ) -> Result<bool, GitError> {
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["merge-base", "--is-ancestor", ancestor, descendant]);
        let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
        match output.code {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(local_failure(&output)),
        }
    }

    /// The commit's committer date, in seconds since the Unix epoch.
    async fn committer_time(&self, repository: &Path, commit: &str, deadline: Instant) -> Result<u64, GitError> {
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["log", "-1", "--format=%ct", commit]);
        let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
        if !output.success {
            return Err(local_failure(&output));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        text.trim().parse().map_err(|_| GitError::Failed(format!("commit {commit} has no committer date: {text}")))
    }

    async fn rev_parse(&self, repository: &Path, revision: &str, deadline: Instant) -> Result<String, GitError> {
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["rev-parse", "--verify", "--quiet", revision]);
        let output = self.run(command, Bounds::reading(LISTING_MAX, deadline)).await?;
        if !output.success {
            return Err(local_failure(&output));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Every file under `tree`, named `prefix` + its path in the tree.
    async fn tree_files(
        &self,
        repository: &Path,
        tree: &str,
        prefix: &str,
        deadline: Instant,
    ) -> Result<Vec<(String, Entry)>, GitError> {
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["ls-tree", "-r", "-z", "-l", "--full-tree", tree]);
        let output = self.run(command, Bounds::reading(self.config.max_bytes, deadline)).await?;
        if !output.success {
            return Err(local_failure(&output));
        }
        let mut files = Vec::new();
        for record in output.stdout.split(|byte| *byte == 0).filter(|record| !record.is_empty()) {
            let mut entry = Entry::parse(record).ok_or_else(|| {
                GitError::Unreadable(format!(
                    "a file under {} has a name that is not UTF-8",
                    quoted(prefix.trim_end_matches('/'))
                ))
            })?;
            let name = std::mem::take(&mut entry.path);
            entry.path = format!("{prefix}{name}");
            entry.check()?;
            files.push((name, entry));
        }
        Ok(files)
    }

    /// The files' texts, in order, read in one `git cat-file --batch`.
    async fn blobs(
        &self,
        repository: &Path,
        files: &[(String, Entry)],
        total: u64,
        deadline: Instant,
    ) -> Result<Vec<String>, GitError> {
        if files.is_empty() {
            return Ok(Vec::new());
        }
        let input: String = files.iter().map(|(_, entry)| format!("{}\n", entry.id)).collect();
        let mut command = self.command(Some(repository), None, &[]);
        command.args(["cat-file", "--batch"]);
        // Each file comes with a header line (`<id> blob <size>`) and a line break.
        let headroom = 100 * files.len() as u64;
        let bounds = Bounds { stdin: Some(input.into_bytes()), ..Bounds::reading(total + headroom, deadline) };
        let output = self.run(command, bounds).await?;
        if !output.success {
            return Err(local_failure(&output));
        }
        let mut rest = output.stdout.as_slice();
        let mut texts = Vec::with_capacity(files.len());
        for (_, entry) in files {
            let name = &entry.path;
            let truncated = || GitError::Failed(format!("git cat-file ended before {}", quoted(name)));
            let end = rest.iter().position(|byte| *byte == b'\n').ok_or_else(truncated)?;
            let header = String::from_utf8_lossy(&rest[..end]);
            let size: usize = match header.split(' ').collect::<Vec<_>>().as_slice() {
                [id, "blob", size] if *id == entry.id => size.parse().map_err(|_| truncated())?,
                _ => return Err(GitError::Damaged(format!("cannot read {}: {header}", quoted(name)))),
            };
            let body = rest.get(end + 1..end + 1 + size).ok_or_else(truncated)?;
            let text = std::str::from_utf8(body)
                .map_err(|_| GitError::Unreadable(format!("{} is not UTF-8 text", quoted(name))))?;
            texts.push(text.to_owned());
            rest = rest.get(end + 2 + size..).unwrap_or_default();
        }
        Ok(texts)
    }
}

/// Running git.
impl Git {
    /// A git process that knows nothing of the host: a cleared environment, an empty
    /// home, no system or global configuration, no helpers, no prompts, no hooks, only
    /// the transports the deployment admits, and redirects not followed.
    fn command(&self, repository: Option<&Path>, credential: Option<&Credential>, settings: &[String]) -> Command {
        let mut command = Command::new(&self.config.program);
        command.env_clear();
        if let Some(path) = std::env::var_os("PATH") {
            command.env("PATH", path);
        }
        command
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "/bin/false")
            .env("SSH_ASKPASS", "/bin/false")
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_LITERAL_PATHSPECS", "1")
            // No repository is looked for above the empty home (`ls-remote` needs none).
            .env("GIT_CEILING_DIRECTORIES", &self.config.cache)
            .env("LC_ALL", "C")
            .current_dir(&self.home);
        if let Some(credential) = credential {
            // In the environment, where no other user's `ps` sees it.
            command
                .env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env("GIT_CONFIG_VALUE_0", format!("Authorization: Basic {}", credential.encoded()));
        }
        if let Some(repository) = repository {
            let mut option = OsString::from("--git-dir=");
            option.push(repository);
            command.arg(option);
        }
        let mut fixed = vec![
            "credential.helper=",
            "protocol.allow=never",
            "protocol.https.allow=always",
            "protocol.ext.allow=never",
            "http.followRedirects=false",
            "fetch.unpackLimit=1",
            "transfer.unpackLimit=1",
            "core.hooksPath=/dev/null",
            "core.fsmonitor=false",
            "gc.auto=0",
            "maintenance.auto=false",
            "fetch.writeCommitGraph=false",
            "safe.bareRepository=explicit",
            "init.defaultBranch=main",
        ];
        if self.config.allow_insecure {
            fixed.extend(["protocol.http.allow=always", "protocol.git.allow=always", "protocol.file.allow=always"]);
        }
        for setting in fixed.into_iter().map(str::to_owned).chain(settings.iter().cloned()) {
            command.arg("-c").arg(setting);
        }
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).process_group(0);
        command
    }

    /// Runs `command` within `bounds`: killed (with every process it started) at the
    /// deadline, when its output passes the bound, or when the fetch it runs grows the
    /// cache by more than `max_bytes`.
    async fn run(&self, mut command: Command, bounds: Bounds) -> Result<Output, GitError> {
        if bounds.stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let child = command
            .spawn()
            .map_err(|error| GitError::Failed(format!("cannot run {}: {error}", self.config.program.display())))?;
        let mut running = Running(child);
        if let (Some(input), Some(mut pipe)) = (bounds.stdin, running.0.stdin.take()) {
            // Written beside the reading, so that neither pipe fills while the other waits.
            tokio::spawn(async move {
                // A process that stops reading (killed, or failing) ends this write.
                let _ = pipe.write_all(&input).await;
            });
        }
        let (mut stdout, mut stderr) = (running.0.stdout.take(), running.0.stderr.take());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (mut out_buffer, mut err_buffer) = (vec![0u8; 64 * 1024], vec![0u8; 4096]);
        let mut ticker = tokio::time::interval(POLL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let too_large = GitError::TooLarge { limit: self.config.max_bytes };
        let timed_out = GitError::TimedOut { limit: self.config.timeout };
        while stdout.is_some() || stderr.is_some() {
            tokio::select! {
                read = read_some(&mut stdout, &mut out_buffer) => match read {
                    0 => stdout = None,
                    read => {
                        if (out.len() + read) as u64 > bounds.stdout_max {
                            running.kill().await;
                            return Err(match bounds.stdout_max >= self.config.max_bytes {
                                true => too_large,
                                false => GitError::Failed(format!("git printed more than {} bytes", bounds.stdout_max)),
                            });
                        }
                        out.extend_from_slice(&out_buffer[..read]);
                    }
                },
                read = read_some(&mut stderr, &mut err_buffer) => match read {
                    0 => stderr = None,
                    read => err.extend_from_slice(&err_buffer[..read.min(STDERR_KEPT.saturating_sub(err.len()))]),
                },
                _ = ticker.tick(), if bounds.watch.is_some() => {
                    if self.grew_too_much(bounds.watch.as_ref()).await {
                        running.kill().await;
                        return Err(too_large);
                    }
                }
                () = tokio::time::sleep_until(bounds.deadline) => {
                    running.kill().await;
                    return Err(timed_out);
                }
            }
        }
        let status = tokio::select! {
            status = running.0.wait() => status,
            () = tokio::time::sleep_until(bounds.deadline) => {
                running.kill().await;
                return Err(timed_out);
            }
        };
        let status = status.map_err(|error| GitError::Failed(format!("cannot wait for git: {error}")))?;
        // A fetch faster than one poll is measured here.
        if self.grew_too_much(bounds.watch.as_ref()).await {
            return Err(too_large);
        }
        Ok(Output { success: status.success(), code: status.code(), stdout: out, stderr: err })
    }

    async fn grew_too_much(&self, watch: Option<&(PathBuf, u64)>) -> bool {
        match watch {
            Some((objects, before)) => size_of(objects.clone()).await.saturating_sub(*before) > self.config.max_bytes,
            None => false,
        }
    }
}

impl Bounds {
    fn reading(stdout_max: u64, deadline: Instant) -> Self {
        Bounds { stdin: None, stdout_max, watch: None, deadline }
    }
}

/// A started git process; its whole process group is killed if it is dropped before it
/// ends (git runs helpers: `remote-https`, `index-pack`, `upload-pack`).
struct Running(Child);

impl Running {
    async fn kill(&mut self) {
        self.kill_group();
        // Reaps it; the group's other processes die of the same signal.
        let _ = self.0.kill().await;
    }

    fn kill_group(&self) {
        // While the leader is not reaped its id cannot be reused, so the group is ours;
        // `id()` is `None` once it is. Pid 1 would mean every process: never ours.
        let group = self.0.id().and_then(|id| i32::try_from(id).ok()).filter(|id| *id > 1);
        if let Some(group) = group.and_then(rustix::process::Pid::from_raw) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Reads what is there, or 0 at the end (or on an error); never resolves once closed.
async fn read_some(pipe: &mut Option<impl AsyncRead + Unpin>, buffer: &mut [u8]) -> usize {
    match pipe {
        Some(pipe) => pipe.read(buffer).await.unwrap_or(0),
        None => std::future::pending().await,
    }
}

/// An entry of `git ls-tree -l -z`: `<mode> <type> <id> <size>\t<path>`.
struct Entry {
    mode: String,
    kind: String,
    id: String,
    size: u64,
    path: String,
}

impl Entry {
    fn parse(record: &[u8]) -> Option<Entry> {
        let tab = record.iter().position(|byte| *byte == b'\t')?;
        let path = String::from_utf8(record[tab + 1..].to_vec()).ok()?;
        let meta = std::str::from_utf8(&record[..tab]).ok()?;
        let mut fields = meta.split_whitespace();
        let (mode, kind, id) = (fields.next()?, fields.next()?, fields.next()?);
        let size = fields.next().and_then(|size| size.parse().ok()).unwrap_or(0);
        Some(Entry { mode: mode.to_owned(), kind: kind.to_owned(), id: id.to_owned(), size, path })
    }

    /// A regular file, or why the document cannot hold it.
    fn check(&self) -> Result<(), GitError> {
        let path = &self.path;
        match (self.kind.as_str(), self.mode.as_str()) {
            ("blob", "120000") => {
                Err(GitError::Unreadable(format!("{} is a symbolic link, which a document may not hold", quoted(path))))
            }
            ("blob", _) => Ok(()),
            ("commit", _) => {
                Err(GitError::Unreadable(format!("{} is a submodule, which a document may not hold", quoted(path))))
            }
            (kind, _) => Err(GitError::Unreadable(format!("{} is a {kind}, not a file", quoted(path)))),
        }
    }
}

/// A host written plainly: an IP address (IPv4 dotted, IPv6 bracketed, which
/// `Reach::target` checks) or a DNS name whose last label starts with a letter (so never
/// a number that curl or the resolver would read as an IPv4 address).
fn plain_host(host: &str) -> Result<(), String> {
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
    };
    let last = host.rsplit('.').next().unwrap_or_default();
    if host.len() <= 253 && host.split('.').all(label) && last.starts_with(|first: char| first.is_ascii_alphabetic()) {
        return Ok(());
    }
    Err(format!("{} is neither a DNS name nor an IP address written plainly (a.b.c.d or [v6])", quoted(host)))
}

/// A full commit id (SHA-1 or SHA-256, lowercase hexadecimal).
fn object_id(text: &str) -> Result<&str, GitError> {
    if (text.len() == 40 || text.len() == 64) && text.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) {
        return Ok(text);
    }
    Err(GitError::Invalid(format!("{} is not a commit id (40 lowercase hexadecimal digits)", quoted(text))))
}

/// A branch name as `git check-ref-format --branch` admits it.
fn branch_name(branch: &str) -> Result<(), GitError> {
    let refused = branch.is_empty()
        || branch.len() > 255
        || branch.starts_with(['-', '/', '.'])
        || branch.ends_with(['/', '.'])
        || branch.ends_with(".lock")
        || branch.contains("..")
        || branch.contains("//")
        || branch.contains("@{")
        || branch.contains("/.")
        || branch == "@"
        || branch.chars().any(|character| character.is_control() || " ~^:?*[\\".contains(character));
    match refused {
        true => Err(GitError::Invalid(format!("{} is not a branch name", quoted(branch)))),
        false => Ok(()),
    }
}

/// A path in a commit, `None` for the root: relative, without `.`, `..` or empty parts.
fn document_path(path: &str) -> Result<Option<String>, GitError> {
    let trimmed = path.trim_start_matches("./").trim_end_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok(None);
    }
    let refused = path.starts_with('/')
        || trimmed.chars().any(char::is_control)
        || trimmed.split('/').any(|part| part.is_empty() || part == "." || part == "..");
    match refused {
        true => Err(GitError::Invalid(format!(
            "{} is not a path in the repository (relative, without . or .. parts)",
            quoted(path)
        ))),
        false => Ok(Some(trimmed.to_owned())),
    }
}

/// git's stderr as one bounded line, the credential (and any header line) taken out.
fn scrub(stderr: &[u8], credential: Option<&Credential>) -> String {
    let mut text = String::from_utf8_lossy(stderr).into_owned();
    if let Some(credential) = credential {
        for secret in [credential.encoded(), credential.token.clone()] {
            if !secret.is_empty() {
                text = text.replace(&secret, "<credential>");
            }
        }
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| if line.to_ascii_lowercase().contains("authorization") { "<header>" } else { line })
        .collect();
    let line = lines.join("; ");
    match line.char_indices().nth(MESSAGE_MAX) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None if line.is_empty() => "no reason given".to_owned(),
        None => line,
    }
}

/// A failure talking to the server: unreachable when the connection never was.
fn remote_failure(message: &str) -> GitError {
    let signs = [
        "could not resolve host",
        "failed to connect",
        "couldn't connect",
        "connection refused",
        "unable to connect",
        "connection timed out",
        "network is unreachable",
        "no route to host",
        "unable to look up",
    ];
    let lowered = message.to_ascii_lowercase();
    match signs.iter().any(|sign| lowered.contains(sign)) {
        true => GitError::Unreachable(message.to_owned()),
        false => GitError::Failed(message.to_owned()),
    }
}

/// A failure of git on the cache repository alone: damaged, or git's reason.
fn local_failure(output: &Output) -> GitError {
    let message = scrub(&output.stderr, None);
    match damaged(&message) {
        true => GitError::Damaged(message),
        false => GitError::Failed(message),
    }
}

/// What git says of a repository that is not one any more, or whose files are broken.
fn damaged(message: &str) -> bool {
    let signs = [
        "not a git repository",
        "corrupt",
        "bad config",
        "bad object",
        "bad packfile",
        "index file",
        "is too small",
        "unable to read",
        "inflate",
        "invalid object",
        "loose object",
        "object file",
        "non-monotonic",
        "unknown object type",
        "file exists",
        "differ in contents",
        "unable to rename",
        "shallow file",
    ];
    let lowered = message.to_ascii_lowercase();
    signs.iter().any(|sign| lowered.contains(sign))
}

/// `attempt`, and once more on a rebuilt cache repository if it found it damaged.
async fn rebuilt_once<T>(
    repository: &Path,
    mut attempt: impl AsyncFnMut() -> Result<T, GitError>,
) -> Result<T, GitError> {
    match attempt().await {
        Err(GitError::Damaged(_)) => {
            remove(repository).await;
            attempt().await
        }
        result => result,
    }
}

/// Removes the cache repository of a read that found it damaged.
async fn forget_damaged<T>(repository: &Path, result: Result<T, GitError>) -> Result<T, GitError> {
    if let Err(GitError::Damaged(_)) = &result {
        remove(repository).await;
    }
    result
}

/// Removes `path` whatever it is (a missing one is fine).
async fn remove(path: &Path) {
    let path = path.to_owned();
    let _ = tokio::task::spawn_blocking(move || match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
        Ok(_) => std::fs::remove_file(&path),
        Err(_) => Ok(()),
    })
    .await;
}

/// The bytes of the files under `directory` (0 for none).
async fn size_of(directory: PathBuf) -> u64 {
    fn walk(directory: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(directory) else { return 0 };
        entries
            .flatten()
            .map(|entry| match entry.file_type() {
                Ok(kind) if kind.is_dir() => walk(&entry.path()),
                Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |meta| meta.len()),
                _ => 0,
            })
            .fold(0, u64::saturating_add)
    }
    tokio::task::spawn_blocking(move || walk(&directory)).await.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::process::Command as Blocking;

    use rand::RngCore;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// git for the tests' own repositories, as blind to the host's configuration.
    fn shell(directory: &Path, home: &Path, args: &[&str]) -> String {
        let output = Blocking::new("git")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Tester")
            .env("GIT_AUTHOR_EMAIL", "tester@example.com")
            .env("GIT_COMMITTER_NAME", "Tester")
            .env("GIT_COMMITTER_EMAIL", "tester@example.com")
            .env("LC_ALL", "C")
            .current_dir(directory)
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// A repository served as `<root>/served/repo.git`, written through `<root>/work`.
    struct Upstream {
        root: tempfile::TempDir,
    }

    impl Upstream {
        fn new() -> Self {
            let upstream = Upstream { root: tempfile::tempdir().unwrap() };
            for directory in [upstream.work(), upstream.served(), upstream.home()] {
                std::fs::create_dir_all(directory).unwrap();
            }
            shell(&upstream.work(), &upstream.home(), &["init", "-q", "-b", "main"]);
            shell(&upstream.served(), &upstream.home(), &["init", "-q", "--bare", "-b", "main", "repo.git"]);
            upstream
        }

        fn work(&self) -> PathBuf {
            self.root.path().join("work")
        }

        fn served(&self) -> PathBuf {
            self.root.path().join("served")
        }

        fn home(&self) -> PathBuf {
            self.root.path().join("home")
        }

        fn file_url(&self) -> String {
            format!("file://{}", self.served().join("repo.git").display())
        }

        fn git(&self, args: &[&str]) -> String {
            shell(&self.work(), &self.home(), args)
        }

        /// Writes `files`, commits them and pushes the commit to `main`.
        fn commit(&self, files: &[(&str, &[u8])], message: &str) -> String {
            for (path, bytes) in files {
                let path = self.work().join(path);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, bytes).unwrap();
            }
            self.git(&["add", "-A"]);
            self.git(&["commit", "-q", "--allow-empty", "-m", message]);
            let served = self.served().join("repo.git");
            self.git(&["push", "-q", "--force", served.to_str().unwrap(), "HEAD:main"]);
            self.git(&["rev-parse", "HEAD"])
        }

        /// The object at `revision` (`commit:path`) in the served repository.
        fn object(&self, revision: &str) -> String {
            self.git(&["rev-parse", revision])
        }
    }

    /// `git daemon` serving an upstream on 127.0.0.1, until dropped (`git` runs
    /// `git-daemon` as a child: the whole group goes).
    struct Daemon {
        _process: Running,
        port: u16,
    }

    impl Daemon {
        async fn start(upstream: &Upstream) -> Daemon {
            let port = free_port().await;
            let process = tokio::process::Command::new("git")
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", upstream.home())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .arg("daemon")
                .arg("--reuseaddr")
                .arg(format!("--base-path={}", upstream.served().display()))
                .args(["--export-all", "--listen=127.0.0.1", &format!("--port={port}"), "--enable=receive-pack"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .process_group(0)
                .spawn()
                .unwrap();
            let process = Running(process);
            let started = Instant::now();
            while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await.is_err() {
                assert!(started.elapsed() < Duration::from_secs(10), "git daemon did not listen");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Daemon { _process: process, port }
        }

        fn url(&self) -> String {
            format!("git://127.0.0.1:{}/repo.git", self.port)
        }
    }

    async fn free_port() -> u16 {
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap().local_addr().unwrap().port()
    }

    /// A Git that admits insecure URLs and 127.0.0.0/8, caching in `cache`.
    fn local_git(cache: &Path) -> Git {
        Git::new(GitConfig {
            timeout: Duration::from_secs(20),
            allow_insecure: true,
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            ..GitConfig::new(cache.to_owned())
        })
    }

    fn remote(url: &str) -> Remote<'_> {
        Remote { url, credential: None }
    }

    #[tokio::test]
    async fn the_head_of_a_branch_over_file_and_git_urls() {
        let upstream = Upstream::new();
        let first = upstream.commit(&[("fleet.yaml", b"a: 1\n")], "one");
        let daemon = Daemon::start(&upstream).await;
        let cache = tempfile::tempdir().unwrap();
        let git = local_git(cache.path());
        for url in [upstream.file_url(), daemon.url()] {
            assert_eq!(git.head(&remote(&url), "main").await.unwrap(), first, "{url}");
            assert_eq!(git.head(&remote(&url), "nope").await, Err(GitError::NoBranch("nope".to_owned())), "{url}");
        }
        assert!(matches!(git.head(&remote(&daemon.url()), "-x").await, Err(GitError::Invalid(_))));
        // No repository lookup, no configuration, nothing written in the home.
        assert_eq!(std::fs::read_dir(cache.path().join("home")).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn reads_a_file_a_directory_and_nothing() {
        let upstream = Upstream::new();
        let first = upstream.commit(
            &[
                ("fleet.yaml", b"a: 1\n"),
                ("docs/b.yaml", b"b: 2\n"),
                ("docs/a.yaml", b"a: 1\n"),
                ("docs/sub/c.yaml", b"c: 3\n"),
                ("docs-notes.txt", b"notes\n"),
                ("blobs/bin.dat", &[0xff, 0xfe, 0x00, 0x80]),
            ],
            "one",
        );
        let daemon = Daemon::start(&upstream).await;
        let cache = tempfile::tempdir().unwrap();
        let git = local_git(cache.path());
        let url = daemon.url();
        git.fetch("source", &remote(&url), &first).await.unwrap();

        let file = git.read("source", &first, "fleet.yaml").await.unwrap();
        assert_eq!(file.id, upstream.object(&format!("{first}:fleet.yaml")));
        assert_eq!(file.files, [("fleet.yaml".to_owned(), "a: 1\n".to_owned())]);

        let docs = git.read("source", &first, "docs").await.unwrap();
        assert_eq!(docs.id, upstream.object(&format!("{first}:docs")));
        let names: Vec<&str> = docs.files.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["a.yaml", "b.yaml", "sub/c.yaml"]);
        assert_eq!(docs.files[2].1, "c: 3\n");
        assert_eq!(git.read("source", &first, "./docs/").await.unwrap(), docs);

        assert_eq!(git.read("source", &first, "missing.yaml").await, Err(GitError::Missing("missing.yaml".to_owned())));
        assert_eq!(git.read("source", &first, "docs/zz").await, Err(GitError::Missing("docs/zz".to_owned())));
        let binary = git.read("source", &first, "blobs").await.unwrap_err();
        assert_eq!(binary, GitError::Unreadable("\"blobs/bin.dat\" is not UTF-8 text".to_owned()));
        let root = git.read("source", &first, ".").await.unwrap_err();
        assert!(matches!(root, GitError::Unreadable(ref why) if why.contains("blobs/bin.dat")), "{root}");
        for escape in ["../x", "/etc/passwd", "docs/../fleet.yaml"] {
            assert!(matches!(git.read("source", &first, escape).await, Err(GitError::Invalid(_))), "{escape}");
        }
        let never_fetched = "1".repeat(40);
        assert!(matches!(git.read("source", &never_fetched, "docs").await, Err(GitError::Failed(_))));
        let raw = git.raw_commit("source", &first).await.unwrap();
        assert_eq!(
            raw,
            upstream.git(&["cat-file", "commit", &first]).into_bytes().into_iter().chain([b'\n']).collect::<Vec<_>>()
        );

        // A commit that leaves docs alone: the same tree, and the history tells where it
        // changed last.
        let second = upstream.commit(&[("other.txt", b"x\n")], "two");
        git.fetch("source", &remote(&url), &second).await.unwrap();
        assert_eq!(git.read("source", &second, "docs").await.unwrap().id, docs.id);
        assert!(git.descends("source", &remote(&url), &first, &second).await.unwrap());
        assert_eq!(git.changed_in("source", Some(&first), &second, "docs").await.unwrap(), None);
        assert_eq!(git.changed_in("source", Some(&first), &second, "other.txt").await.unwrap(), Some(second.clone()));
        assert_eq!(git.changed_in("source", None, &second, "docs").await.unwrap(), Some(first.clone()));
        assert_eq!(git.changed_in("source", Some(&first), &second, ".").await.unwrap(), Some(second.clone()));
        assert_eq!(git.changed_in("source", Some(&"2".repeat(40)), &second, "docs").await.unwrap(), None);
    }

    #[tokio::test]
    async fn descends_after_a_commit_and_not_after_a_force_push() {
        let upstream = Upstream::new();
        let first = upstream.commit(&[("fleet.yaml", b"a: 1\n")], "one");
        let second = upstream.commit(&[("fleet.yaml", b"a: 2\n")], "two");
        let daemon = Daemon::start(&upstream).await;
        let cache = tempfile::tempdir().unwrap();
        let git = local_git(cache.path());
        let url = daemon.url();
        git.fetch("source", &remote(&url), &second).await.unwrap();
        assert!(git.descends("source", &remote(&url), &first, &second).await.unwrap());
        assert!(git.descends("source", &remote(&url), &second, &second).await.unwrap());

        upstream.git(&["checkout", "-q", "--orphan", "rewritten"]);
        let rewritten = upstream.commit(&[("fleet.yaml", b"a: 3\n")], "rewritten");
        assert_eq!(git.head(&remote(&url), "main").await.unwrap(), rewritten);
        git.fetch("source", &remote(&url), &rewritten).await.unwrap();
        assert!(!git.descends("source", &remote(&url), &second, &rewritten).await.unwrap());
        assert!(!git.descends("source", &remote(&url), &rewritten, &second).await.unwrap());
        // From an empty cache, and from an ancestor the server never had.
        assert!(!git.descends("fresh", &remote(&url), &second, &rewritten).await.unwrap());
        assert!(!git.descends("fresh", &remote(&url), &"1".repeat(40), &rewritten).await.unwrap());
    }

    #[tokio::test]
    async fn a_fetch_or_a_document_past_max_bytes_is_refused() {
        let upstream = Upstream::new();
        let mut noise = vec![0u8; 4 << 20];
        rand::rng().fill_bytes(&mut noise);
        let big = upstream.commit(&[("big.yaml", &noise)], "big");
        let cache = tempfile::tempdir().unwrap();
        let small = Git::new(GitConfig { max_bytes: 1 << 20, ..local_git(cache.path()).config });
        let url = upstream.file_url();
        assert_eq!(small.fetch("source", &remote(&url), &big).await, Err(GitError::TooLarge { limit: 1 << 20 }));
        assert!(!small.repository("source").exists(), "the half-fetched cache is removed");

        // Fetched within a larger bound, the document is still too large to read.
        local_git(cache.path()).fetch("source", &remote(&url), &big).await.unwrap();
        assert_eq!(small.read("source", &big, "big.yaml").await, Err(GitError::TooLarge { limit: 1 << 20 }));
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let holder = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = listener.accept().await {
                held.push(connection);
            }
        });
        let cache = tempfile::tempdir().unwrap();
        let git = Git::new(GitConfig { timeout: Duration::from_secs(2), ..local_git(cache.path()).config });
        let url = format!("git://127.0.0.1:{port}/repo.git");
        let (silent, never) = (remote(&url), "1".repeat(40));
        let started = Instant::now();
        let (head, fetch) = tokio::join!(git.head(&silent, "main"), git.fetch("k", &silent, &never));
        let limit = Duration::from_secs(2);
        assert_eq!(head, Err(GitError::TimedOut { limit }));
        assert_eq!(fetch, Err(GitError::TimedOut { limit }));
        assert!(started.elapsed() < Duration::from_millis(3500), "{:?}", started.elapsed());
        holder.abort();

        let closed = format!("git://127.0.0.1:{}/repo.git", free_port().await);
        assert!(matches!(git.head(&remote(&closed), "main").await, Err(GitError::Unreachable(_))));
    }

    #[test]
    fn url_forms_refused_before_any_lookup() {
        let cache = tempfile::tempdir().unwrap();
        let git = Git::new(GitConfig::new(cache.path().to_owned()));
        let refused = |url: &str, why: &str| {
            let error = git.check_url(url).unwrap_err();
            assert!(error.contains(why), "{url}: {error}");
        };
        refused("ext::sh -c touch% /tmp/pwned", "remote helper");
        refused("fd::17", "remote helper");
        refused("https::https://example.com/r.git", "remote helper");
        refused("file:///srv/repo.git", "must be https");
        refused("http://example.com/r.git", "must be https");
        refused("git://example.com/r.git", "must be https");
        refused("ssh://git@example.com/r.git", "https://");
        refused("git@example.com:org/r.git", "https://");
        refused("https://user:token@example.com/r.git", "credentials");
        refused("https://token@example.com/r.git", "credentials");
        refused("https://example.com", "a path after the host");
        refused("https://example.com/", "a path after the host");
        refused("https://example.com/r.git?x=1", "?");
        refused("https://example.com/r .git", "spaces");
        refused("https://2130706433/r.git", "neither a DNS name");
        refused("https://0177.0.0.1/r.git", "neither a DNS name");
        refused("https://0x7f.1/r.git", "neither a DNS name");
        refused("https://%31.example.com/r.git", "");
        refused("https://example.com:99999/r.git", "no port");
        refused(&format!("https://example.com/{}", "r".repeat(2048)), "at most");
        let parsed = git.check_url("https://Git.Example.com/org/r.git").unwrap();
        assert_eq!((parsed.scheme, parsed.host.as_str(), parsed.port), (Scheme::Https, "Git.Example.com", 443));
        assert_eq!(git.check_url("https://[2606:2800::1]:8443/r").unwrap().port, 8443);

        let insecure = Git::new(GitConfig { allow_insecure: true, ..GitConfig::new(cache.path().to_owned()) });
        assert_eq!(insecure.check_url("git://example.com/r.git").unwrap().port, 9418);
        assert_eq!(insecure.check_url("http://example.com/r.git").unwrap().port, 80);
        assert_eq!(insecure.check_url("file:///srv/repo.git").unwrap().path, "/srv/repo.git");
        assert!(insecure.check_url("file://host/srv/repo.git").is_err());
        assert!(insecure.check_url("ext::sh").is_err());
    }

    #[tokio::test]
    async fn addresses_inside_are_refused_unless_admitted() {
        let cache = tempfile::tempdir().unwrap();
        let mut git = Git::new(GitConfig { allow_insecure: true, ..GitConfig::new(cache.path().to_owned()) });
        for url in [
            "http://127.0.0.1/r.git",
            "https://10.0.0.1/r.git",
            "http://169.254.169.254/latest",
            "http://[::ffff:127.0.0.1]/r.git",
            "https://[::1]/r.git",
            "git://192.168.1.1/r.git",
        ] {
            let error = git.check_reach(url).await.unwrap_err();
            assert!(error.contains("not a public address"), "{url}: {error}");
        }
        for url in ["http://2130706433/r.git", "http://0177.0.0.1/r.git"] {
            assert!(git.check_reach(url).await.unwrap_err().contains("neither a DNS name"), "{url}");
        }
        // A name is refused whole when one of its addresses is inside.
        git.names.insert("mixed.test".to_owned(), vec!["93.184.216.34".parse().unwrap(), "10.0.0.1".parse().unwrap()]);
        let error = git.check_reach("https://mixed.test/r.git").await.unwrap_err();
        assert!(error.contains("mixed.test resolves to 10.0.0.1"), "{error}");
        git.names.insert("public.test".to_owned(), vec!["93.184.216.34".parse().unwrap()]);
        git.check_reach("https://public.test/r.git").await.unwrap();
        // `--git-allow` admits a network.
        let admitted = local_git(cache.path());
        admitted.check_reach("http://127.0.0.1/r.git").await.unwrap();
        assert!(admitted.check_reach("http://10.0.0.1/r.git").await.is_err());
        assert!(admitted.check_reach("file:///srv/r.git").await.is_ok());
    }

    #[tokio::test]
    async fn a_damaged_cache_is_rebuilt() {
        let upstream = Upstream::new();
        let first = upstream.commit(&[("fleet.yaml", b"a: 1\n")], "one");
        let cache = tempfile::tempdir().unwrap();
        let git = local_git(cache.path());
        let url = upstream.file_url();
        let repository = git.repository("source");
        let garble = |directory: &Path| {
            fn walk(directory: &Path, files: &mut Vec<PathBuf>) {
                for entry in std::fs::read_dir(directory).unwrap().flatten() {
                    match entry.file_type().unwrap().is_dir() {
                        true => walk(&entry.path(), files),
                        false => files.push(entry.path()),
                    }
                }
            }
            let mut files = Vec::new();
            walk(directory, &mut files);
            for file in files {
                let mut permissions = std::fs::metadata(&file).unwrap().permissions();
                #[expect(clippy::permissions_set_readonly_false, reason = "a test's own temporary file")]
                permissions.set_readonly(false);
                std::fs::set_permissions(&file, permissions).unwrap();
                std::fs::write(&file, b"garbage").unwrap();
            }
        };

        // Every file garbled: no repository any more.
        git.fetch("source", &remote(&url), &first).await.unwrap();
        garble(&repository);
        git.fetch("source", &remote(&url), &first).await.unwrap();
        assert_eq!(git.read("source", &first, "fleet.yaml").await.unwrap().files[0].1, "a: 1\n");

        // Its packs garbled: a read says so and forgets the cache, the next fetch rebuilds it.
        garble(&repository.join("objects"));
        assert!(matches!(git.read("source", &first, "fleet.yaml").await, Err(GitError::Damaged(_))));
        assert!(!repository.exists());
        git.fetch("source", &remote(&url), &first).await.unwrap();
        assert_eq!(git.read("source", &first, "fleet.yaml").await.unwrap().files[0].1, "a: 1\n");

        // A file where the repository was.
        remove(&repository).await;
        std::fs::write(&repository, b"garbage").unwrap();
        git.fetch("source", &remote(&url), &first).await.unwrap();
        assert_eq!(git.read("source", &first, "fleet.yaml").await.unwrap().files[0].1, "a: 1\n");
    }

    #[tokio::test]
    async fn http_connects_to_the_checked_address_with_the_credential_and_no_redirect() {
        let upstream = Upstream::new();
        let first = upstream.commit(&[("fleet.yaml", b"a: 1\n")], "one");
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let credential = Credential { username: None, token: "s3cret-token".to_owned() };
        let expected = format!("Basic {}", BASE64.encode(b"x-access-token:s3cret-token"));
        let server = tokio::spawn(serve_http(listener, upstream.served(), upstream.home(), expected, seen.clone()));
        let cache = tempfile::tempdir().unwrap();
        let mut git = local_git(cache.path());
        // A name no resolver knows: curl reaches the server only through the pinned address.
        git.names.insert("repo.test".to_owned(), vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
        let url = format!("http://repo.test:{port}/repo.git");
        let with = Remote { url: &url, credential: Some(&credential) };

        assert_eq!(git.head(&with, "main").await.unwrap(), first);
        git.fetch("source", &with, &first).await.unwrap();
        assert_eq!(git.read("source", &first, "fleet.yaml").await.unwrap().files[0].1, "a: 1\n");
        let requests = std::mem::take(&mut *seen.lock().unwrap());
        assert!(!requests.is_empty());
        for request in &requests {
            assert!(request.ends_with(&format!("host=repo.test:{port}")), "{request}");
        }

        let error = git.head(&remote(&url), "main").await.unwrap_err();
        assert!(matches!(error, GitError::Failed(_)), "{error}");

        seen.lock().unwrap().clear();
        let moved = format!("http://repo.test:{port}/moved/repo.git");
        let error = git.head(&Remote { url: &moved, credential: Some(&credential) }, "main").await.unwrap_err();
        assert!(!error.to_string().contains("s3cret"), "{error}");
        let requests = std::mem::take(&mut *seen.lock().unwrap());
        assert!(requests.iter().all(|request| request.contains("/moved/")), "a redirect was followed: {requests:?}");
        server.abort();
    }

    #[test]
    fn the_credential_never_shows_in_a_message() {
        let credential = Credential { username: Some("me".to_owned()), token: "s3cret".to_owned() };
        let header = format!("Authorization: Basic {}", credential.encoded());
        let stderr = format!("fatal: s3cret was refused\n> {header}\nfatal: {}\n", credential.encoded());
        let message = scrub(stderr.as_bytes(), Some(&credential));
        assert!(!message.contains("s3cret") && !message.contains(&credential.encoded()), "{message}");
        assert_eq!(message, "fatal: <credential> was refused; <header>; fatal: <credential>");
        assert!(!format!("{credential:?}").contains("s3cret"));
    }

    /// Answers git's smart HTTP through `git http-backend`, wanting `authorization`, and
    /// redirecting `/moved/...`; notes each request's target and Host header in `seen`.
    async fn serve_http(
        listener: TcpListener,
        root: PathBuf,
        home: PathBuf,
        authorization: String,
        seen: Arc<Mutex<Vec<String>>>,
    ) {
        while let Ok((connection, _)) = listener.accept().await {
            let (root, home, authorization, seen) = (root.clone(), home.clone(), authorization.clone(), seen.clone());
            tokio::spawn(async move {
                let _ = answer(connection, &root, &home, &authorization, &seen).await;
            });
        }
    }

    async fn answer(
        connection: TcpStream,
        root: &Path,
        home: &Path,
        authorization: &str,
        seen: &Mutex<Vec<String>>,
    ) -> std::io::Result<()> {
        let mut connection = BufReader::new(connection);
        let mut request = String::new();
        connection.read_line(&mut request).await?;
        let mut parts = request.split_whitespace();
        let (method, target) =
            (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned());
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if connection.read_line(&mut line).await? == 0 || line.trim_end().is_empty() {
                break;
            }
            if let Some((name, value)) = line.trim_end().split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let header = |name: &str| headers.get(name).cloned().unwrap_or_default();
        let mut body = vec![0; header("content-length").parse().unwrap_or(0)];
        connection.read_exact(&mut body).await?;
        seen.lock().unwrap().push(format!("{method} {target} host={}", header("host")));
        let response = if let Some(rest) = target.strip_prefix("/moved") {
            format!("HTTP/1.1 302 Found\r\nLocation: {rest}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .into_bytes()
        } else if header("authorization") != authorization {
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"t\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                .to_vec()
        } else {
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let mut backend = tokio::process::Command::new("git")
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", home)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_PROJECT_ROOT", root)
                .env("GIT_HTTP_EXPORT_ALL", "1")
                .env("REQUEST_METHOD", &method)
                .env("PATH_INFO", path)
                .env("QUERY_STRING", query)
                .env("CONTENT_TYPE", header("content-type"))
                .env("CONTENT_LENGTH", body.len().to_string())
                .env("GIT_PROTOCOL", header("git-protocol"))
                .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
                .env("REMOTE_ADDR", "127.0.0.1")
                .arg("http-backend")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()?;
            let mut stdin = backend.stdin.take().unwrap();
            let writer = tokio::spawn(async move {
                let _ = stdin.write_all(&body).await;
            });
            let output = backend.wait_with_output().await?;
            let _ = writer.await;
            let cgi = output.stdout;
            let (end, gap) = match cgi.windows(4).position(|window| window == b"\r\n\r\n") {
                Some(end) => (end, 4),
                None => (cgi.windows(2).position(|window| window == b"\n\n").unwrap_or(cgi.len()), 2),
            };
            let mut status = "200 OK".to_owned();
            let mut head = String::new();
            for line in String::from_utf8_lossy(&cgi[..end]).lines() {
                match line.strip_prefix("Status: ") {
                    Some(code) => status = code.to_owned(),
                    None => head.push_str(&format!("{line}\r\n")),
                }
            }
            let content = cgi.get(end + gap..).unwrap_or_default();
            let mut response =
                format!("HTTP/1.1 {status}\r\n{head}Content-Length: {}\r\nConnection: close\r\n\r\n", content.len())
                    .into_bytes();
            response.extend_from_slice(content);
            response
        };
        connection.get_mut().write_all(&response).await?;
        connection.get_mut().shutdown().await
    }
}
