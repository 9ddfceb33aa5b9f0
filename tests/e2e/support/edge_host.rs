//! `fleet-edge.wasm` served on 127.0.0.1 by `wasmtime-wasi-http`, the crate `wasmtime
//! serve` is built on, as a `wasi:http/proxy` host runs it: a fresh instance per
//! request, `FLEET_ORIGIN` in its environment, outgoing HTTP to the origin. Used by the
//! end-to-end tests and by the benchmark (`#[path]`-included).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use hyper::server::conn::http1;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

/// The component `host/build.rs` built.
pub const EDGE_WASM: &str = env!("FLEET_EDGE_WASM");

struct Guest {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
}

impl WasiView for Guest {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for Guest {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: Default::default() }
    }
}

struct Edge {
    pre: ProxyPre<Guest>,
    origin: String,
}

impl Edge {
    async fn handle(
        &self,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> anyhow::Result<hyper::Response<HyperOutgoingBody>> {
        let wasi = WasiCtx::builder().env("FLEET_ORIGIN", &self.origin).inherit_stderr().build();
        let guest = Guest { wasi, http: WasiHttpCtx::new(), table: ResourceTable::new() };
        let mut store = Store::new(self.pre.engine(), guest);
        let (sender, receiver) = oneshot::channel();
        let request = store.data_mut().http().new_incoming_request(Scheme::Http, request)?;
        let out = store.data_mut().http().new_response_outparam(sender)?;
        let pre = self.pre.clone();
        let task = tokio::task::spawn(async move {
            let proxy = pre.instantiate_async(&mut store).await?;
            proxy.wasi_http_incoming_handler().call_handle(&mut store, request, out).await
        });
        match receiver.await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(error.into()),
            Err(_) => match task.await {
                Ok(Ok(())) => anyhow::bail!("the edge never answered"),
                Ok(Err(error)) => Err(anyhow::anyhow!("the edge trapped: {error:?}")),
                Err(error) => Err(error.into()),
            },
        }
    }
}

/// The edge, listening on 127.0.0.1 until dropped.
pub struct EdgeServer {
    pub base: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EdgeServer {
    /// Serves the component at `wasm` with `FLEET_ORIGIN=origin`.
    pub fn start(wasm: &Path, origin: &str) -> anyhow::Result<EdgeServer> {
        let component = compiled(wasm)?;
        let mut linker = Linker::new(component.engine());
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        let edge = Arc::new(Edge { pre: ProxyPre::new(linker.instantiate_pre(&component)?)?, origin: origin.into() });
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let base = format!("http://{}", listener.local_addr()?);
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let (stop, mut stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(listener) else { return };
                loop {
                    let (socket, _) = tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok(accepted) => accepted,
                            Err(_) => continue,
                        },
                        _ = &mut stopped => return,
                    };
                    let edge = edge.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |request| {
                            let edge = edge.clone();
                            async move { edge.handle(request).await }
                        });
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(socket), service).await;
                    });
                }
            });
        });
        Ok(EdgeServer { base, stop: Some(stop), thread: Some(thread) })
    }
}

/// The component at `wasm`, compiled once a process: compiling the edge (the whole
/// planner) takes seconds, and every test of the edge starts servers of its own.
fn compiled(wasm: &Path) -> anyhow::Result<Component> {
    static COMPILED: Mutex<Vec<(PathBuf, Component)>> = Mutex::new(Vec::new());
    let mut compiled = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, component)) = compiled.iter().find(|(path, _)| path == wasm) {
        return Ok(component.clone());
    }
    let component = Component::from_file(&Engine::default(), wasm)?;
    compiled.push((wasm.to_path_buf(), component.clone()));
    Ok(component)
}

impl Drop for EdgeServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
