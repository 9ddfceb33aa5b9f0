//! Webhooks (issue 53): how long an event takes from its commit to its delivery at a
//! local receiver, and the large apply in a tenant with ten subscriptions in force.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::server::Server;
use crate::support::{count, median, ms};

/// Test events timed one after another.
const EVENTS: usize = 100;
/// Subscriptions in force during the apply.
const SUBSCRIPTIONS: usize = 10;

/// `webhook_delivery_ms_p50`: a `webhook.test` event made (its request sent) to its
/// delivery received, 100 times; then `apply_webhooks_ms`: the large apply with ten
/// subscriptions taking every event.
pub async fn figures(server: &Server, document: &Value) -> Result<Value> {
    let (url, mut received) = receiver().await?;
    let token = &server.tokens.webhooks;
    let put = |name: String| json!({"name": name, "url": url, "events": ["*"]}).to_string();
    server.post_group(token, "webhooks/put", put("timed".to_owned())).await?;
    let mut samples = Vec::with_capacity(EVENTS);
    let mut early: HashMap<String, Instant> = HashMap::new();
    for _ in 0..EVENTS {
        let started = Instant::now();
        let answer = server.post_group(token, "webhooks/test", json!({"name": "timed"}).to_string()).await?;
        let id = serde_json::from_str::<Value>(&answer)?["id"].as_str().unwrap_or_default().to_owned();
        let arrived = loop {
            if let Some(arrived) = early.remove(&id) {
                break arrived;
            }
            match tokio::time::timeout(Duration::from_secs(10), received.recv()).await {
                Ok(Some((got, at))) if got == id => break at,
                Ok(Some((got, at))) => {
                    early.insert(got, at);
                }
                _ => bail!("the webhook delivery {id} did not arrive within 10 s"),
            }
        };
        samples.push(arrived.saturating_duration_since(started));
    }
    for index in 1..SUBSCRIPTIONS {
        server.post_group(token, "webhooks/put", put(format!("more-{index}"))).await?;
    }
    let objects = count(document);
    let body = json!({"document": document}).to_string();
    let started = Instant::now();
    let applied = server.post_as(token, "apply", body).await?;
    let apply = started.elapsed();
    if serde_json::from_str::<Value>(&applied)?["applied"].as_u64() != Some(objects as u64) {
        bail!("the apply with webhooks did not run {objects} calls");
    }
    Ok(json!({"webhook_delivery_ms_p50": ms(median(samples)), "apply_webhooks_ms": ms(apply)}))
}

/// A receiver on 127.0.0.1 that answers 200 and tells each delivery's `webhook-id` and
/// when it arrived.
async fn receiver() -> Result<(String, mpsc::UnboundedReceiver<(String, Instant)>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (sender, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sender = sender.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let at = Instant::now();
                    let id = request.headers().get("webhook-id").and_then(|id| id.to_str().ok()).unwrap_or("");
                    let _ = sender.send((id.to_owned(), at));
                    async { Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new()))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((format!("http://{address}/hook"), received))
}
