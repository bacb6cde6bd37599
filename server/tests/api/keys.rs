//! Composed idempotency keys (issue 36, spec section 10): any source's
//! `key` template over the request's fields replaces its provider's key, so
//! two deliveries of one business event under different provider ids are
//! one event; a field that is missing is a 400 with its reason, or with
//! `key_fallback = "digest"` the body's SHA-256, said on the record.

use replaysafe_core::db::MIGRATOR;
use sqlx::PgPool;

use crate::helpers::{spawn_app, test_config, Destination};

const SECRET: &[u8] = b"gh-secret";

fn config(destination: &str) -> replaysafe_core::config::Config {
    test_config(
        &format!(
            r#"
[[source]]
slug = "orders"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
key = "{{/order/id}}:{{/status}}"

[[source]]
slug = "loose"
provider = "github"
secrets = ["gh-secret"]
destination = "{destination}"
key = "order-{{/order/id}}"
key_fallback = "digest"
"#
        ),
        &[],
    )
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_composed_key_makes_one_event_of_what_the_provider_sent_twice(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let paid = r#"{"order":{"id":7},"status":"paid"}"#;
    assert_eq!(
        app.github_delivery("orders", "d-1", paid, SECRET).await,
        200
    );
    // The provider's second send of the same business event, under a new
    // delivery id and with a field of its own: a duplicate.
    let again = r#"{"order":{"id":7},"status":"paid","attempt":2}"#;
    assert_eq!(
        app.github_delivery("orders", "d-2", again, SECRET).await,
        200
    );
    // Ten copies at once of a third event: one claim.
    let refunded = r#"{"order":{"id":7},"status":"refunded"}"#;
    let copies = (0..10).map(|i| {
        let app = &app;
        async move {
            app.github_delivery("orders", &format!("d-r{i}"), refunded, SECRET)
                .await
        }
    });
    for status in futures_util::future::join_all(copies).await {
        assert_eq!(status, 200);
    }
    // A field missing: 400, with the reason, recorded.
    let r = crate::helpers::github_request(
        &app.client,
        &app.url("/hooks/orders"),
        "d-3",
        r#"{"status":"paid"}"#,
        SECRET,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let reason = r.text().await.unwrap();
    assert!(reason.contains("{/order/id}"), "{reason}");
    app.drain().await;

    let keys: Vec<String> =
        sqlx::query_scalar("SELECT idem_key FROM events WHERE source = 'orders' ORDER BY idem_key")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(keys, ["7:paid", "7:refunded"]);
    let mut forwarded = destination.keys();
    forwarded.sort();
    assert_eq!(forwarded, ["orders:7:paid", "orders:7:refunded"]);
    let rejected: Vec<(String, String)> = sqlx::query_as(
        "SELECT reject_kind, reject_reason FROM deliveries WHERE source = 'orders' AND NOT verified",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].0, "key");
}

#[sqlx::test(migrator = "MIGRATOR")]
async fn a_missing_field_falls_back_to_the_bodys_digest_and_says_so(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let app = spawn_app(pool.clone(), config(&destination.url)).await;
    let body = r#"{"note":"no order here"}"#;
    assert_eq!(app.github_delivery("loose", "g-1", body, SECRET).await, 200);
    // The same bytes again (a retry): the same digest, a duplicate.
    assert_eq!(app.github_delivery("loose", "g-2", body, SECRET).await, 200);
    assert_eq!(
        app.github_delivery("loose", "g-3", r#"{"order":{"id":"A1"}}"#, SECRET)
            .await,
        200
    );
    app.drain().await;
    let events: Vec<(String, String)> = sqlx::query_as(
        "SELECT e.idem_key, d.verification FROM events e
         JOIN deliveries d ON d.id = e.first_delivery_id
         WHERE e.source = 'loose' ORDER BY e.idem_key",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].0, "order-A1");
    assert!(!events[0].1.contains("SHA-256"), "{events:?}");
    assert!(events[1].0.starts_with("sha256:"), "{events:?}");
    assert!(
        events[1].1.contains("keyed by a SHA-256 of the body"),
        "{events:?}"
    );
    assert_eq!(destination.count(), 2);
}

/// The content type is not signed: a captured form delivery re-posted as
/// `text/plain` has no form fields, and with `key_fallback = "digest"` would
/// be keyed anew by its body. Such a key is not bound by the signature, so
/// the replay guard holds it: one event.
#[sqlx::test(migrator = "MIGRATOR")]
async fn a_form_key_with_a_digest_fallback_survives_a_changed_content_type(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "forms"
provider = "github"
secrets = ["gh-secret"]
destination = "{}"
key = "order-{{form:order}}"
key_fallback = "digest"
"#,
            destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    let body = "order=o-1&status=paid";
    let url = app.url("/hooks/forms");
    let post = |content_type: &'static str, delivery: &'static str| {
        crate::helpers::github_request_as(&app.client, &url, delivery, body, SECRET, content_type)
            .send()
    };
    let first = post("application/x-www-form-urlencoded", "f-1")
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let flipped = post("text/plain", "f-2").await.unwrap();
    assert_eq!(flipped.status(), 200);
    app.drain().await;
    let keys: Vec<String> = sqlx::query_scalar("SELECT idem_key FROM events")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(keys, ["order-o-1"]);
    assert_eq!(destination.count(), 1);
}

/// Ordering keys keep working with composed keys: one order's events, each
/// its own composed key, wait behind each other at an ordered destination
/// and reach it in receipt order.
#[sqlx::test(migrator = "MIGRATOR")]
async fn composed_keys_keep_their_ordering_keys(pool: PgPool) {
    let destination = Destination::start(vec![]).await;
    let config = test_config(
        &format!(
            r#"
[[source]]
slug = "orders"
provider = "github"
secrets = ["gh-secret"]
key = "{{/order/id}}:{{/status}}"

[[source.destination]]
name = "ordered"
url = "{}"
ordering = "per_key"
ordering_key = "/order/id"
"#,
            destination.url
        ),
        &[],
    );
    let app = spawn_app(pool.clone(), config).await;
    for (i, status) in ["created", "paid", "shipped"].into_iter().enumerate() {
        let body = format!(r#"{{"order":{{"id":7}},"status":"{status}"}}"#);
        assert_eq!(
            app.github_delivery("orders", &format!("o-{i}"), &body, SECRET)
                .await,
            200
        );
    }
    // An ordered destination is leased through its gate, one of a key at
    // a time: each pass forwards the next.
    let workers = app.workers();
    while workers.pace_once("test-worker").await.unwrap() > 0 {}
    let lanes: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT e.idem_key, d.ordering_key FROM events e JOIN dispatches d ON d.event_id = e.id
         ORDER BY e.id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let seven = Some("7".to_owned());
    assert_eq!(
        lanes,
        [
            ("7:created".to_owned(), seven.clone()),
            ("7:paid".to_owned(), seven.clone()),
            ("7:shipped".to_owned(), seven)
        ]
    );
    assert_eq!(
        destination.keys(),
        ["orders:7:created", "orders:7:paid", "orders:7:shipped"]
    );
}
