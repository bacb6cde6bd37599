use leptos::prelude::*;

use crate::api::alerts::{list_alerts, AlertRow, AlertsPage as Page, EndSilence, SilenceRule};
use crate::auth::Role;
use crate::components::*;
use crate::reader::{Reader, When};

/// How often the page reads the alerts again.
const REFRESH: std::time::Duration = std::time::Duration::from_secs(15);

/// What is wrong now and what was lately: each alert with its rule, when,
/// the figures that fired it and the deliveries behind it. Admins silence a
/// rule for a while (its alerts are still kept, not sent).
#[component]
pub fn AlertsPage() -> impl IntoView {
    let reader = Reader::current();
    let silence = ServerAction::<SilenceRule>::new();
    let unsilence = ServerAction::<EndSilence>::new();
    let tick = ticking(REFRESH);
    let data = Resource::new(
        move || {
            (
                silence.version().get(),
                unsilence.version().get(),
                tick.get(),
            )
        },
        |_| list_alerts(),
    );
    view! {
        <section class="page">
            <h1>"Alerts"</h1>
            <p class="lede">
                "The alert rules replaysafe evaluates, as they fired and resolved. Each transition is sent once to the configured channels; "
                <code>"replaysafe alerts test --channel NAME"</code> " checks a channel."
            </p>
            {move || silence.value().get().map(|r| match r {
                Ok(s) => view! { <p class="result ok" role="status">{format!("{} silenced until {}.", s.rule, reader.stamp(&s.until))}</p> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            {move || unsilence.value().get().and_then(|r| r.err()).map(|e| view! { <ErrorBox message=error_text(&e)/> })}
            <Transition fallback=|| view! { <p class="muted">"Loading alerts…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(page) => view! { <AlertLists page silence unsilence/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn AlertLists(
    page: Page,
    silence: ServerAction<SilenceRule>,
    unsilence: ServerAction<EndSilence>,
) -> impl IntoView {
    let reader = Reader::current();
    let firing = if page.firing.is_empty() {
        view! { <p class="empty" data-testid="no-firing">"Nothing is firing."</p> }.into_any()
    } else {
        view! { <AlertTable rows=page.firing testid="firing-alerts" silence/> }.into_any()
    };
    let silences = (!page.silences.is_empty()).then(|| view! {
        <h2>"Silences"</h2>
        <table class="data" data-testid="silences">
            <thead><tr>
                <th scope="col">"Rule"</th><th scope="col">"Source"</th><th scope="col">{reader.label("Until")}</th>
                <th scope="col">"By"</th><th scope="col">"Reason"</th>
                <th scope="col"><span class="visually-hidden">"Actions"</span></th>
            </tr></thead>
            <tbody>
                {page.silences.into_iter().map(|s| view! {
                    <tr data-rule=s.rule.clone()>
                        <td><code>{s.rule.clone()}</code></td>
                        <td>{s.source.clone().unwrap_or_else(|| "every source".into())}</td>
                        <td><When at=s.until/></td><td>{s.by}</td><td>{s.reason}</td>
                        <td><IfRole role=Role::Admin>
                            <ActionForm action=unsilence attr:class="inline">
                                <input type="hidden" name="id" value=s.id/>
                                <button type="submit" class="secondary">"End silence"</button>
                            </ActionForm>
                        </IfRole></td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    });
    let resolved = if page.resolved.is_empty() {
        view! { <p class="empty">"None resolved yet."</p> }.into_any()
    } else {
        view! { <AlertTable rows=page.resolved testid="resolved-alerts" silence/> }.into_any()
    };
    view! {
        <h2>"Firing"</h2>
        {firing}
        {silences}
        <h2>"Recently resolved"</h2>
        {resolved}
    }
}

#[component]
fn AlertTable(
    rows: Vec<AlertRow>,
    testid: &'static str,
    silence: ServerAction<SilenceRule>,
) -> impl IntoView {
    let reader = Reader::current();
    view! {
        <table class="data" data-testid=testid>
            <thead><tr>
                <th scope="col">"Rule"</th><th scope="col">"Source"</th>
                <th scope="col">{reader.label("Since")}</th><th scope="col">{reader.label("Resolved")}</th>
                <th scope="col">"What held"</th>
                <th scope="col"><span class="visually-hidden">"Actions"</span></th>
            </tr></thead>
            <tbody>
                {rows.into_iter().map(|a| {
                    let firing = a.state == replaysafe_types::states::AlertState::Firing;
                    let label = format!("Silence {} on {}", a.title, a.source);
                    let (rule, source) = (a.rule.clone(), a.source.clone());
                    view! {
                        <tr data-rule=a.rule.clone() data-source=a.source.clone() data-state=a.state.as_str()>
                            <td>{a.title.clone()}</td>
                            <td><code>{a.source.clone()}</code></td>
                            <td><When at=a.started_at ago=true/></td>
                            <td>{a.resolved_at.map_or_else(|| "–".into_any(), |t| view! { <When at=t ago=true/> }.into_any())}</td>
                            <td>
                                {a.summary.clone()} ". " <a href=a.link.clone()>"See what is behind it"</a>
                                {a.silenced_until.map(|u| view! { <div class="muted small">{move || format!("silenced until {}", reader.stamp(&u))}</div> })}
                            </td>
                            <td>{firing.then(move || view! {
                                <IfRole role=Role::Admin>
                                    {
                                        let (rule, source, label) = (rule.clone(), source.clone(), label.clone());
                                        view! {
                                            <ActionForm action=silence attr:class="inline">
                                                <input type="hidden" name="rule" value=rule/>
                                                <input type="hidden" name="source" value=source/>
                                                <label>"For" <select name="minutes">
                                                    <option value="60">"1 hour"</option>
                                                    <option value="240">"4 hours"</option>
                                                    <option value="1440">"1 day"</option>
                                                </select></label>
                                                <label>"Reason" <input name="reason" required size="24" autocomplete="off"/></label>
                                                <button type="submit" class="secondary" aria-label=label>"Silence"</button>
                                            </ActionForm>
                                        }
                                    }
                                </IfRole>
                            })}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}
