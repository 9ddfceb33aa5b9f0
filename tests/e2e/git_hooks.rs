//! A git source's inbound hook (SPEC §20.3): `POST /hooks/sources/<id>` signed as
//! GitHub, GitLab or the Standard Webhooks specification sign, against a source of
//! mode auto on a repository served by `git daemon`. A signed hook refreshes the
//! source; a wrong or missing signature does nothing; a delivery is acted on once; a
//! body over 1 MiB and an unknown hook are refused; hooks faster than one per 10 s
//! make one refresh at the end of the window.

use std::io::{Read as _, Write as _};
use std::process::Command;
use std::time::{Duration, SystemTime};

use data_encoding::{BASE64, HEXLOWER};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::fleet::estate;
use crate::support::git::{Daemon, Repo};
use crate::support::{FLEET, Server, code, eventually};

/// A source of mode auto whose first commit is applied, and what its hook needs.
struct Hooked {
    server: Server,
    token: String,
    repo: Repo,
    _daemon: Daemon,
    /// The hook's secret, as the put answered it.
    secret: String,
    /// `/hooks/sources/<id>`.
    path: String,
    /// The first commit, applied.
    first: String,
}

impl Hooked {
    fn new() -> Hooked {
        Hooked::serving(false)
    }

    /// With `sealed`, the server seals secrets at rest under a key of its own.
    fn serving(sealed: bool) -> Hooked {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("git-cache");
        let key = dir.path().join("secret.key");
        let mut flags =
            vec!["--git-allow-insecure", "--git-allow", "127.0.0.0/8", "--git-cache", cache.to_str().unwrap()];
        if sealed {
            let made = Command::new(FLEET).args(["admin", "secret-key", "generate", "-o"]).arg(&key).output().unwrap();
            assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
            flags.extend(["--secret-key-file", key.to_str().unwrap()]);
        }
        let server = Server::start_in(dir, &flags);
        let token = server.tenant_with_token("acme");
        let repo = Repo::new();
        let first = repo.commit(&[("fleet/estate.yaml", Some(&yaml(64)))], &[]);
        let daemon = Daemon::serve(&repo.root());
        let put = server.ok(&token, "sources/put", json!({"url": daemon.url(), "path": "fleet", "mode": "auto"}));
        let secret = put["hookSecret"].as_str().unwrap().to_owned();
        let path = put["source"]["hookUrl"].as_str().unwrap().to_owned();
        assert!(path.starts_with("/hooks/sources/"), "{put}");
        let source = server.ok(&token, "sources/refresh", json!({}))["source"].clone();
        assert_eq!(source["status"]["appliedCommit"], first.as_str(), "{source}");
        let hooked = Hooked { server, token, repo, _daemon: daemon, secret, path, first };
        hooked.settled();
        hooked
    }

    /// Commits the estate with pool gpu-a's GPUs at `gpus`; the commit.
    fn commit(&self, gpus: u64) -> String {
        self.repo.commit(&[("fleet/estate.yaml", Some(&yaml(gpus)))], &[])
    }

    /// POSTs `body` to `path` with `headers`; the status and the JSON answer.
    fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
        let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let mut request = client.post(format!("{}{path}", self.server.base)).body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        let text = response.text().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// POSTs to the source's hook.
    fn hook(&self, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
        self.post(&self.path, headers, body)
    }

    /// A hook as GitHub sends it: signed with `secret`, delivery `delivery`.
    fn github(&self, secret: &str, delivery: &str, body: &[u8]) -> (u16, Value) {
        let signature = github_signature(secret, body);
        self.hook(&[("X-Hub-Signature-256", &signature), ("X-GitHub-Delivery", delivery)], body)
    }

    fn source(&self) -> Value {
        self.server.ok(&self.token, "sources/get", json!({}))["source"].clone()
    }

    fn applied(&self) -> String {
        self.source()["status"]["appliedCommit"].as_str().unwrap_or_default().to_owned()
    }

    /// Waits until `commit` is applied.
    fn applies(&self, commit: &str, limit: Duration) {
        let applied = eventually(limit, || self.applied() == commit);
        assert!(applied, "{commit} is applied within {limit:?}: {}", self.source());
    }

    /// When the source's next cycle is due, in milliseconds since the epoch.
    fn due_ms(&self) -> i64 {
        self.server.sql().number("SELECT due_ms FROM sources")
    }

    /// Waits until no cycle is running or due before a minute from now, and answers when
    /// the next one is due.
    fn settled(&self) -> i64 {
        let settled = eventually(Duration::from_secs(20), || {
            let holder = self.server.sql().number("SELECT count(*) FROM sources WHERE holder IS NOT NULL");
            holder == 0 && self.due_ms() > now_ms() + 60_000
        });
        assert!(settled, "the source's cycles end, the next an interval on: due at {}", self.due_ms());
        self.due_ms()
    }

    fn deliveries(&self) -> i64 {
        self.server.sql().number("SELECT count(*) FROM source_hook_deliveries WHERE delivery <> ''")
    }

    /// Pool gpu-a's GPUs in the estate.
    fn gpus(&self) -> Option<u64> {
        self.server.ok(&self.token, "fleet/export", json!({}))["document"]["pools"]["gpu-a"]["gpus"].as_u64()
    }
}

/// The estate with pool gpu-a's GPUs at `gpus`, as YAML.
fn yaml(gpus: u64) -> String {
    let mut document = estate();
    document["pools"]["gpu-a"]["gpus"] = json!(gpus);
    serde_yaml_ng::to_string(&document).unwrap()
}

fn now_ms() -> i64 {
    i64::try_from(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap()
}

/// `X-Hub-Signature-256`: `sha256=` and the hex of HMAC-SHA256 of the body, keyed with
/// the secret's text.
fn github_signature(secret: &str, body: &[u8]) -> String {
    let mut mac = mac(secret.as_bytes());
    mac.update(body);
    format!("sha256={}", HEXLOWER.encode(&mac.finalize().into_bytes()))
}

/// `webhook-signature` as SPEC §18 signs: `v1,` and the base64 of HMAC-SHA256 over
/// `id.timestamp.body`, keyed with the bytes of the base64 after `whsec_`.
fn standard_signature(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> String {
    let key = BASE64.decode(secret.strip_prefix("whsec_").unwrap().as_bytes()).unwrap();
    let mut mac = mac(&key);
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", BASE64.encode(&mac.finalize().into_bytes()))
}

/// Milliseconds since the epoch of an answer's `refreshAt`.
fn refresh_at(answer: &Value) -> i64 {
    let at = humantime::parse_rfc3339_weak(answer["refreshAt"].as_str().unwrap()).unwrap();
    i64::try_from(at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// What the server answers a request written raw on a connection of its own.
fn raw_answer(server: &Server, head: &str, body: &[&[u8]]) -> String {
    let mut stream = std::net::TcpStream::connect(server.address()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    for part in body {
        stream.write_all(part).unwrap();
    }
    let mut answer = vec![0; 4096];
    let read = stream.read(&mut answer).unwrap();
    String::from_utf8_lossy(&answer[..read]).into_owned()
}

#[test]
fn a_github_signed_hook_refreshes_the_source_once_per_delivery() {
    let hooked = Hooked::new();
    let due = hooked.settled();
    let second = hooked.commit(48);
    let body = br#"{"ref": "refs/heads/main", "after": "whatever the sender says"}"#;

    // A wrong or a missing signature: 401, nothing recorded, nothing brought forward.
    let (status, answer) = hooked.github("whsec_c2lnbmVkIHdpdGggYW5vdGhlciBzZWNyZXQ=", "gh-1", body);
    assert_eq!((status, code(&answer)), (401, "UNAUTHENTICATED"), "{answer}");
    assert!(!answer.to_string().contains(&hooked.secret), "the secret is never echoed");
    let (status, answer) = hooked.hook(&[("X-GitHub-Delivery", "gh-1")], body);
    assert_eq!((status, code(&answer)), (401, "UNAUTHENTICATED"), "{answer}");
    let tampered = github_signature(&hooked.secret, b"another body");
    let (status, _) = hooked.hook(&[("X-Hub-Signature-256", &tampered)], body);
    assert_eq!(status, 401);
    assert_eq!((hooked.deliveries(), hooked.due_ms()), (0, due));
    assert_eq!(hooked.applied(), hooked.first);

    // Signed: accepted at once, and the new commit is applied within seconds.
    let before = now_ms();
    let (status, answer) = hooked.github(&hooked.secret, "gh-1", body);
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["accepted"], true);
    assert!(
        (before - 1_000..=now_ms() + 1_000).contains(&refresh_at(&answer)),
        "the first hook refreshes now: {answer}"
    );
    hooked.applies(&second, Duration::from_secs(15));
    assert_eq!(hooked.gpus(), Some(48));

    // The same delivery again: ignored, nothing brought forward.
    let due = hooked.settled();
    let (status, answer) = hooked.github(&hooked.secret, "gh-1", body);
    assert_eq!((status, answer), (200, json!({"ignored": "duplicate delivery"})));
    assert_eq!((hooked.deliveries(), hooked.due_ms()), (1, due));

    // An unknown hook, a GET, and bodies over 1 MiB, declared or chunked.
    let (status, answer) = hooked.post("/hooks/sources/0123456789abcdef", &[], body);
    assert_eq!((status, code(&answer)), (404, "NOT_FOUND"), "{answer}");
    assert_eq!(hooked.server.get(&hooked.path).0, 405);
    let address = hooked.server.address();
    let declared = format!(
        "POST {} HTTP/1.1\r\nHost: {address}\r\nX-Hub-Signature-256: sha256=00\r\nContent-Length: {}\r\n\r\n",
        hooked.path,
        (1 << 20) + 1
    );
    let answer = raw_answer(&hooked.server, &declared, &[&[b' '; 1024]]);
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");
    let chunked = format!("POST {} HTTP/1.1\r\nHost: {address}\r\nTransfer-Encoding: chunked\r\n\r\n", hooked.path);
    let chunk = [format!("{:x}\r\n", 64 << 10).into_bytes(), vec![b' '; 64 << 10], b"\r\n".to_vec()].concat();
    let mut parts: Vec<&[u8]> = vec![chunk.as_slice(); 16];
    parts.push(b"1\r\n \r\n0\r\n\r\n");
    let answer = raw_answer(&hooked.server, &chunked, &parts);
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("PAYLOAD_TOO_LARGE"), "{answer}");
    assert_eq!(hooked.deliveries(), 1);
}

#[test]
fn a_gitlab_token_is_the_secret_itself() {
    // The hook's secret sealed at rest is opened to check the hook.
    let hooked = Hooked::serving(true);
    let stored = hooked.server.sql().text("SELECT hook_secret FROM sources").unwrap();
    assert!(stored.starts_with("enc:v1:") && !stored.contains(&hooked.secret["whsec_".len()..]), "{stored}");
    let due = hooked.settled();
    let second = hooked.commit(48);

    let (status, answer) = hooked.hook(&[("X-Gitlab-Token", "not the secret"), ("X-Gitlab-Event-UUID", "gl-1")], b"{}");
    assert_eq!((status, code(&answer)), (401, "UNAUTHENTICATED"), "{answer}");
    assert_eq!((hooked.deliveries(), hooked.due_ms()), (0, due));

    let (status, answer) = hooked.hook(&[("X-Gitlab-Token", &hooked.secret), ("X-Gitlab-Event-UUID", "gl-1")], b"{}");
    assert_eq!(status, 202, "{answer}");
    hooked.applies(&second, Duration::from_secs(15));
    let (status, answer) = hooked.hook(&[("X-Gitlab-Token", &hooked.secret), ("X-Gitlab-Event-UUID", "gl-1")], b"{}");
    assert_eq!((status, answer), (200, json!({"ignored": "duplicate delivery"})));
}

#[test]
fn a_standard_webhooks_signature_is_checked_with_its_timestamp() {
    let hooked = Hooked::new();
    let due = hooked.settled();
    let second = hooked.commit(48);
    let body = br#"{"type": "push"}"#;
    let signed = |id: &str, timestamp: &str, signature: &str| {
        hooked.hook(&[("webhook-id", id), ("webhook-timestamp", timestamp), ("webhook-signature", signature)], body)
    };

    // Ten minutes old, or signed with another secret: refused.
    let stale = (now_ms() / 1000 - 600).to_string();
    let (status, answer) = signed("msg_1", &stale, &standard_signature(&hooked.secret, "msg_1", &stale, body));
    assert_eq!((status, code(&answer)), (401, "UNAUTHENTICATED"), "{answer}");
    let now = (now_ms() / 1000).to_string();
    let other = "whsec_c2lnbmVkIHdpdGggYW5vdGhlciBzZWNyZXQ=";
    let (status, _) = signed("msg_1", &now, &standard_signature(other, "msg_1", &now, body));
    assert_eq!(status, 401);
    assert_eq!((hooked.deliveries(), hooked.due_ms()), (0, due));

    let (status, answer) = signed("msg_1", &now, &standard_signature(&hooked.secret, "msg_1", &now, body));
    assert_eq!(status, 202, "{answer}");
    hooked.applies(&second, Duration::from_secs(15));
    let (status, answer) = signed("msg_1", &now, &standard_signature(&hooked.secret, "msg_1", &now, body));
    assert_eq!((status, answer), (200, json!({"ignored": "duplicate delivery"})));
}

#[test]
fn hooks_faster_than_one_per_ten_seconds_make_one_refresh_at_the_end_of_the_window() {
    let hooked = Hooked::new();
    let second = hooked.commit(48);
    let (status, first_hook) = hooked.github(&hooked.secret, "w-1", b"{}");
    assert_eq!(status, 202, "{first_hook}");
    hooked.applies(&second, Duration::from_secs(10));

    // Two more pushes and their hooks inside the window: both wait for its end.
    let third = hooked.commit(40);
    let (_, third_hook) = hooked.github(&hooked.secret, "w-2", b"{}");
    let fourth = hooked.commit(32);
    let (status, fourth_hook) = hooked.github(&hooked.secret, "w-3", b"{}");
    assert_eq!(status, 202, "{fourth_hook}");
    assert_eq!(third_hook["refreshAt"], fourth_hook["refreshAt"], "one refresh for both");
    assert_eq!(refresh_at(&third_hook) - refresh_at(&first_hook), 10_000, "{first_hook} then {third_hook}");
    assert_eq!(hooked.applied(), second, "nothing before the window's end");

    // One cycle, at the window's end, applies the newest commit; the one between is
    // never applied alone, and no other cycle is due.
    hooked.applies(&fourth, Duration::from_secs(20));
    assert!(now_ms() >= refresh_at(&third_hook), "not before the window's end");
    let history = hooked.server.ok(&hooked.token, "fleet/history", json!({}))["revisions"].clone();
    let mut commits: Vec<&str> =
        history.as_array().unwrap().iter().map(|revision| revision["source"]["commit"].as_str().unwrap()).collect();
    commits.sort_unstable();
    let mut expected = vec![hooked.first.as_str(), second.as_str(), fourth.as_str()];
    expected.sort_unstable();
    assert_eq!(commits, expected, "{third} is never applied alone");
    hooked.settled();
    assert_eq!(hooked.gpus(), Some(32));
}
