//! The bucket under a tier's prefix: a blocking face over an `object_store` store, driven by
//! one tokio runtime per process (made lazily, and made again in a forked child, where the
//! parent's worker threads do not exist).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};

use crate::config::TierConfig;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::poison::Recover;

use super::faults::{BucketFaults, FaultyStore};

/// Worker threads of the process's tier runtime: requests are I/O bound.
const RUNTIME_THREADS: usize = 2;
/// Retries of a failed S3 request inside the store, and the longest a request and its
/// retries take: the upload thread retries whole passes itself, with its own back-off.
const STORE_RETRIES: usize = 3;
const STORE_RETRY_TIMEOUT: Duration = Duration::from_secs(30);

/// Parts of a multipart put ([`Bucket::put_file`]), and how many go at once.
pub const PART_BYTES: usize = 16 << 20;
const PARTS_IN_FLIGHT: usize = 4;

/// The process's runtime and the pid it was made in.
static RUNTIME: Mutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = Mutex::new(None);
/// `memory://` stores by URL, so handles of one process on one URL share a bucket.
static MEMORY: OnceLock<Mutex<BTreeMap<String, Arc<InMemory>>>> = OnceLock::new();

/// This process's runtime, made on first use and again after a fork.
fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().recover();
    if let Some((made_in, rt)) = slot.as_ref()
        && *made_in == pid
    {
        return Ok(Arc::clone(rt));
    }
    // A runtime of the parent process: its threads are not here, so it is never dropped
    // (a drop would wait for them).
    if let Some((_, old)) = slot.take() {
        std::mem::forget(old);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_THREADS)
        .thread_name("tidelog-tier-io")
        .enable_all()
        .build()
        .map_err(|e| Error::io("start tier runtime", "", e))?;
    let rt = Arc::new(rt);
    *slot = Some((pid, Arc::clone(&rt)));
    Ok(rt)
}

/// A read of one object under way on the process's runtime, and what
/// [`Bucket::spawn_get_then`] makes of its bytes there (`T`).
#[derive(Debug)]
pub(crate) struct Fetch<T> {
    key: String,
    /// The process whose runtime runs `task`.
    pid: u32,
    /// `None` once waited for.
    task: Option<tokio::task::JoinHandle<object_store::Result<Option<T>>>>,
}

/// What waiting for a [`Fetch`] gives.
#[derive(Debug)]
pub(crate) enum Fetched<T> {
    /// The object's bytes, made into `T`.
    Done(T),
    /// No object at the key.
    Missing,
    /// Started before a fork: the parent's runtime does not run here, read it again.
    Lost,
}

impl<T> Fetch<T> {
    /// The key it reads.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl<T> Drop for Fetch<T> {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        if self.pid == std::process::id() {
            // Not waited for: its bytes are not wanted, so neither is the request.
            task.abort();
        } else {
            // The parent's runtime: its threads (and maybe a lock they held) are not here.
            std::mem::forget(task);
        }
    }
}

/// A bucket and the prefix under it.
pub(crate) struct Bucket {
    store: Arc<dyn ObjectStore>,
    root: Path,
    url: String,
    /// Set by [`Bucket::stop`]: requests under way end at once, later ones fail at once.
    stopping: AtomicBool,
    stopped: tokio::sync::Notify,
    /// Longest one request may take (0: as long as the store's own limits allow).
    request_limit_ms: AtomicU64,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket").field("url", &self.url).finish()
    }
}

impl Bucket {
    /// Opens the bucket `config` names. Options are `object_store`'s keys; `AWS_*`
    /// variables of the environment fill those not given. An option the URL's store does
    /// not know is an error, not ignored.
    pub fn open(config: &TierConfig) -> Result<Bucket> {
        install_tls_provider();
        let url: url::Url = config
            .url
            .parse()
            .map_err(|e| Error::invalid("tier", format!("{:?} is not a URL: {e}", config.url)))?;
        // `memory://NAME/PREFIX`: one bucket per NAME in this process (object_store itself
        // takes `memory:///PREFIX` only, and makes a new bucket for each).
        let scheme = if url.scheme() == "memory" {
            object_store::ObjectStoreScheme::Memory
        } else {
            object_store::ObjectStoreScheme::parse(&url)
                .map_err(|e| Error::invalid("tier", format!("{:?}: {e}", config.url)))?
                .0
        };
        let options = options_for(&scheme, config)?;
        let (store, root): (Arc<dyn ObjectStore>, Path) = match scheme {
            object_store::ObjectStoreScheme::Memory => {
                let root = Path::parse(url.path().trim_start_matches('/'))
                    .map_err(|e| Error::invalid("tier", format!("{:?}: {e}", config.url)))?;
                let key = url.host_str().unwrap_or_default().to_owned();
                let stores = MEMORY.get_or_init(|| Mutex::new(BTreeMap::new()));
                let store = Arc::clone(stores.lock().recover().entry(key).or_default());
                (store, root)
            }
            object_store::ObjectStoreScheme::Local => {
                url.to_file_path().map_err(|()| {
                    Error::invalid("tier", format!("{:?} is not a local path", config.url))
                })?;
                let (store, root) = object_store::parse_url_opts(&url, options)
                    .map_err(|e| Error::invalid("tier", format!("{:?}: {e}", config.url)))?;
                (Arc::from(store), root)
            }
            object_store::ObjectStoreScheme::AmazonS3 => {
                let mut builder = object_store::aws::AmazonS3Builder::new().with_url(url.as_str());
                for (key, value) in options {
                    let key = key
                        .parse()
                        .map_err(|e| Error::invalid("storage_options", format!("{e}")))?;
                    builder = builder.with_config(key, value);
                }
                let retry = object_store::RetryConfig {
                    max_retries: STORE_RETRIES,
                    retry_timeout: STORE_RETRY_TIMEOUT,
                    ..object_store::RetryConfig::default()
                };
                let store = builder
                    .with_retry(retry)
                    .build()
                    .map_err(|e| Error::invalid("tier", format!("{:?}: {e}", config.url)))?;
                let root = Path::parse(url.path().trim_start_matches('/'))
                    .map_err(|e| Error::invalid("tier", format!("{:?}: {e}", config.url)))?;
                (Arc::new(store), root)
            }
            _ => {
                let (store, root) = object_store::parse_url_opts(&url, options)
                    .map_err(|e| Error::invalid("tier", format!("{:?}: {e}", config.url)))?;
                (Arc::from(store), root)
            }
        };
        // A test's fault plan for this URL, if one is installed.
        let store: Arc<dyn ObjectStore> = match BucketFaults::for_url(&config.url) {
            Some(faults) => Arc::new(FaultyStore::new(store, faults)),
            None => store,
        };
        Ok(Bucket {
            store,
            root,
            url: config.url.clone(),
            stopping: AtomicBool::new(false),
            stopped: tokio::sync::Notify::new(),
            request_limit_ms: AtomicU64::new(0),
        })
    }

    /// Limits each later request to `limit` (`None`: no limit of its own); one that takes
    /// longer fails.
    pub fn limit_requests(&self, limit: Option<Duration>) {
        let ms = limit.map_or(0, |l| {
            u64::try_from(l.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        self.request_limit_ms.store(ms, Ordering::Release);
    }

    /// Ends the requests under way (they fail with `Closed`) and refuses later ones: the
    /// handle is closing.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.stopped.notify_waiters();
    }

    /// Runs `f` on the process's runtime until it ends or the bucket is stopped.
    fn block_on<T>(&self, f: impl Future<Output = T>) -> Result<T> {
        // tokio refuses (panics) to block inside its own async context: say so instead.
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::invalid(
                "tier",
                "a tier request was made from inside an async runtime: call from a blocking \
                 thread (for example tokio's spawn_blocking)",
            ));
        }
        let rt = runtime()?;
        let limit_ms = self.request_limit_ms.load(Ordering::Acquire);
        let out = rt.block_on(async {
            let stopped = self.stopped.notified();
            let mut stopped = std::pin::pin!(stopped);
            // Registered before the flag is read: a stop after it wakes this wait.
            stopped.as_mut().enable();
            if self.stopping.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            let f = std::pin::pin!(f);
            let limited = async {
                if limit_ms == 0 {
                    return Some(f.await);
                }
                tokio::time::timeout(Duration::from_millis(limit_ms), f)
                    .await
                    .ok()
            };
            let limited = std::pin::pin!(limited);
            match futures::future::select(limited, stopped).await {
                futures::future::Either::Left((out, _)) => Ok(out),
                futures::future::Either::Right(_) => Err(Error::Closed),
            }
        })?;
        out.ok_or_else(|| Error::Tier {
            op: "request",
            key: self.url.clone(),
            message: format!("no answer within {limit_ms} ms"),
        })
    }

    /// The URL the bucket was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, key: &str) -> Path {
        self.root.parts().chain(Path::from(key).parts()).collect()
    }

    fn run<T>(
        &self,
        op: &'static str,
        key: &str,
        f: impl Future<Output = object_store::Result<T>>,
    ) -> Result<T> {
        self.block_on(f)?.map_err(|e| self.error(op, key, &e))
    }

    fn error(&self, op: &'static str, key: &str, e: &object_store::Error) -> Error {
        Error::Tier {
            op,
            key: format!("{}/{key}", self.url.trim_end_matches('/')),
            message: with_causes(e),
        }
    }

    /// Writes `bytes` at `key`, replacing what is there.
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(key);
        self.run("put", key, self.store.put(&path, PutPayload::from(bytes)))
            .map(drop)
    }

    /// Writes the file at `path` (read through `storage`) to `key`: in one put when it is
    /// small, else as a multipart upload of [`PART_BYTES`] parts, a few in flight, so a big
    /// file is never held in memory whole.
    pub fn put_file(&self, storage: &dyn Storage, path: &std::path::Path, key: &str) -> Result<()> {
        let file = storage
            .open(path, false)
            .map_err(|e| Error::io("open file to upload", path, e))?;
        let len = storage
            .file_metadata(&file, path)
            .map_err(|e| Error::io("stat file to upload", path, e))?
            .len();
        let read = |at: u64, n: usize| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; n];
            let mut done = 0;
            while done < n {
                let got = storage
                    .read_at(&file, path, &mut buf[done..], at + done as u64)
                    .map_err(|e| Error::io("read file to upload", path, e))?;
                if got == 0 {
                    return Err(Error::io(
                        "read file to upload",
                        path,
                        std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                    ));
                }
                done += got;
            }
            Ok(buf)
        };
        if len <= PART_BYTES as u64 {
            let bytes = read(0, usize::try_from(len).unwrap_or(usize::MAX))?;
            return self.put(key, bytes);
        }
        let target = self.path(key);
        // Inside the runtime throughout: the upload's part requests are tasks of it. The
        // file is read on this (the caller's) thread between them.
        self.block_on(async {
            let upload = match self.store.put_multipart(&target).await {
                Ok(upload) => upload,
                Err(e) => return Err(self.error("start multipart put", key, &e)),
            };
            let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            let mut at = 0u64;
            while at < len {
                let n = usize::try_from((len - at).min(PART_BYTES as u64)).unwrap_or(PART_BYTES);
                let chunk = match read(at, n) {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        let _ = writer.abort().await;
                        return Err(e);
                    }
                };
                if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    let _ = writer.abort().await;
                    return Err(self.error("multipart put", key, &e));
                }
                writer.put(Bytes::from(chunk));
                at += n as u64;
            }
            writer
                .finish()
                .await
                .map(drop)
                .map_err(|e| self.error("finish multipart put", key, &e))
        })?
    }

    /// Writes the object at `key` to a new file at `path` (through `storage`), streamed,
    /// synced; false (and no file) when there is no object.
    pub fn get_file(
        &self,
        storage: &dyn Storage,
        key: &str,
        path: &std::path::Path,
    ) -> Result<bool> {
        let source = self.path(key);
        let file = storage
            .create_new(path)
            .map_err(|e| Error::io("create downloaded file", path, e))?;
        let copied = self.block_on(async {
            let mut stream = match self.store.get(&source).await {
                Ok(got) => got.into_stream(),
                Err(object_store::Error::NotFound { .. }) => return Ok(Ok(false)),
                Err(e) => return Ok(Err(e)),
            };
            let mut at = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(e) => return Ok(Err(e)),
                };
                storage
                    .write_at(&file, path, &chunk, at)
                    .map_err(|e| Error::io("write downloaded file", path, e))?;
                at += chunk.len() as u64;
            }
            Ok::<_, Error>(Ok(true))
        })??;
        match copied {
            Ok(true) => storage
                .sync_file(&file, path)
                .map_err(|e| Error::io("sync downloaded file", path, e))
                .map(|()| true),
            Ok(false) => {
                drop(file);
                storage
                    .remove_file(path)
                    .map_err(|e| Error::io("remove empty download", path, e))?;
                Ok(false)
            }
            Err(e) => Err(self.error("get", key, &e)),
        }
    }

    /// Writes `bytes` at `key` only if nothing is there: false when something was.
    pub fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool> {
        let path = self.path(key);
        let put = self
            .store
            .put_opts(&path, PutPayload::from(bytes), PutMode::Create.into());
        match self.block_on(put)? {
            Ok(_) => Ok(true),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(false),
            Err(e) => Err(self.error("put if absent", key, &e)),
        }
    }

    /// The bytes at `key`, `None` when there is no object.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.get_bytes(key)?.map(|b| b.to_vec()))
    }

    /// Starts reading the object at `key` on the process's runtime, then runs `then` on its
    /// bytes on a blocking thread of that runtime (work done while the caller does other
    /// work). [`Bucket::wait_then`] takes the result.
    pub fn spawn_get_then<T: Send + 'static>(
        &self,
        key: &str,
        then: impl FnOnce(Bytes) -> T + Send + 'static,
    ) -> Result<Fetch<T>> {
        let store = Arc::clone(&self.store);
        let path = self.path(key);
        let task = runtime()?.spawn(async move {
            let bytes = match store.get(&path).await {
                Ok(got) => got.bytes().await?,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
            tokio::task::spawn_blocking(move || then(bytes))
                .await
                .map(Some)
                .map_err(|e| object_store::Error::JoinError { source: e })
        });
        Ok(Fetch {
            key: key.to_owned(),
            pid: std::process::id(),
            task: Some(task),
        })
    }

    /// What `fetch` made of the object's bytes.
    pub fn wait_then<T>(&self, mut fetch: Fetch<T>) -> Result<Fetched<T>> {
        let task = match fetch.task.as_mut() {
            Some(task) if fetch.pid == std::process::id() => task,
            _ => return Ok(Fetched::Lost),
        };
        let joined = self.block_on(task)?;
        let got = joined.map_err(|e| Error::Tier {
            op: "get",
            key: fetch.key.clone(),
            message: format!("the request's task ended: {e}"),
        })?;
        match got {
            Ok(Some(value)) => Ok(Fetched::Done(value)),
            Ok(None) => Ok(Fetched::Missing),
            Err(e) => Err(self.error("get", &fetch.key, &e)),
        }
    }

    /// The bytes at `key`, `None` when there is no object, without a copy.
    pub fn get_bytes(&self, key: &str) -> Result<Option<Bytes>> {
        let path = self.path(key);
        let got = self.block_on(async {
            let result = self.store.get(&path).await?;
            result.bytes().await
        })?;
        self.got(key, got)
    }

    fn got(&self, key: &str, got: object_store::Result<Bytes>) -> Result<Option<Bytes>> {
        match got {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("get", key, &e)),
        }
    }

    /// The keys (under the prefix) of every object under `dir`, at any depth, sorted.
    pub fn list_all(&self, dir: &str) -> Result<Vec<String>> {
        let prefix = self.path(dir);
        let root_depth = self.root.parts().count();
        let metas: Vec<_> = self.run(
            "list",
            dir,
            self.store.list(Some(&prefix)).try_collect::<Vec<_>>(),
        )?;
        let mut keys: Vec<String> = metas
            .into_iter()
            .map(|m| {
                m.location
                    .parts()
                    .skip(root_depth)
                    .map(|p| p.as_ref().to_owned())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Deletes the object at `key` (nothing there is not an error).
    pub fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match self.block_on(self.store.delete(&path))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", key, &e)),
        }
    }

    /// The names of the objects right under `dir` whose names sort after `after`, sorted.
    pub fn list_after(&self, dir: &str, after: Option<&str>) -> Result<Vec<String>> {
        let prefix = self.path(dir);
        let listing = match after {
            Some(after) => self
                .store
                .list_with_offset(Some(&prefix), &self.path(&format!("{dir}/{after}"))),
            None => self.store.list(Some(&prefix)),
        };
        let metas: Vec<_> = self.run("list", dir, listing.try_collect::<Vec<_>>())?;
        let depth = prefix.parts().count() + 1;
        let mut names: Vec<String> = metas
            .into_iter()
            .filter(|m| m.location.parts().count() == depth)
            .filter_map(|m| m.location.filename().map(str::to_owned))
            .filter(|name| after.is_none_or(|a| name.as_str() > a))
            .collect();
        names.sort();
        Ok(names)
    }
}

/// Makes `ring` the process's TLS provider unless one is installed: the HTTPS client is
/// built without a provider of its own (see the workspace's Cargo.toml), and any provider
/// a host program installed first serves as well.
fn install_tls_provider() {
    // Err: one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `e` and the errors that caused it, each once: the store's message alone may say only
/// "error sending request" where its cause says which certificate was refused.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    // Bounded: a chain is a few errors deep.
    for _ in 0..16 {
        let Some(c) = cause else { break };
        let text = c.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = c.source();
    }
    message
}

/// The options to build a store for `scheme` with: the given ones, then `AWS_*` variables
/// of the environment for S3. Each key must be one the store knows.
fn options_for(
    scheme: &object_store::ObjectStoreScheme,
    config: &TierConfig,
) -> Result<Vec<(String, String)>> {
    use object_store::ObjectStoreScheme as S;
    let known = |key: &str| -> bool {
        match scheme {
            S::AmazonS3 => key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
            S::GoogleCloudStorage => key.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
            S::MicrosoftAzure => key.parse::<object_store::azure::AzureConfigKey>().is_ok(),
            _ => false,
        }
    };
    // The environment's variables of the store's kind fill the options not given.
    let env_prefix = match scheme {
        S::AmazonS3 => Some("aws_"),
        S::GoogleCloudStorage => Some("google_"),
        S::MicrosoftAzure => Some("azure_"),
        _ => None,
    };
    let mut options: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in &config.options {
        let key = key.to_ascii_lowercase();
        if !known(&key) {
            return Err(Error::invalid(
                "storage_options",
                format!("{key:?} is not an option of the store for {:?}", config.url),
            ));
        }
        options.insert(key, value.clone());
    }
    if let Some(prefix) = env_prefix {
        for (key, value) in std::env::vars() {
            let key = key.to_ascii_lowercase();
            if key.starts_with(prefix) && known(&key) {
                options.entry(key).or_insert(value);
            }
        }
    }
    Ok(options.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::with_causes;

    /// An error with an optional cause.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn a_store_error_message_carries_each_cause_once() {
        let refused = Layer(
            "error sending request",
            Some(Box::new(Layer(
                "client error (Connect)",
                Some(Box::new(Layer(
                    "invalid peer certificate: UnknownIssuer",
                    None,
                ))),
            ))),
        );
        assert_eq!(
            with_causes(&refused),
            "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer"
        );
        let repeated = Layer(
            "get failed: timed out",
            Some(Box::new(Layer("timed out", None))),
        );
        assert_eq!(with_causes(&repeated), "get failed: timed out");
    }
}
