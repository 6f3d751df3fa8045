//! A response body that reports, when it is dropped, how many bytes it sent: how the request
//! metrics and the audit log learn when a long-running response (a watch) has ended, and the
//! metrics the size of an answer sent without a known length.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use crate::respond::Body;

/// `inner`, holding `guard` until the body is dropped (finished, or its client gone).
pub(crate) fn with_guard<G: Send + Sync + 'static>(inner: Body, guard: G) -> Body {
    counted(inner, move |_| drop(guard))
}

/// `inner`, calling `done` with the number of data bytes it sent once the body is dropped
/// (finished, or its client gone): how the request metrics learn the size of an answer whose
/// length was not known when it started.
pub(crate) fn counted<F: FnOnce(u64) + Send + Sync + 'static>(inner: Body, done: F) -> Body {
    Counted {
        inner,
        sent: 0,
        done: Some(done),
    }
    .boxed()
}

struct Counted<F: FnOnce(u64)> {
    inner: Body,
    sent: u64,
    done: Option<F>,
}

// Nothing is pinned in place: the inner body is boxed, the rest moves freely.
impl<F: FnOnce(u64)> Unpin for Counted<F> {}

impl<F: FnOnce(u64)> HttpBody for Counted<F> {
    type Data = Bytes;
    type Error = crate::respond::BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                this.sent += data.len() as u64;
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<F: FnOnce(u64)> Drop for Counted<F> {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done(self.sent);
        }
    }
}
