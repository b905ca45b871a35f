"""onejob's HTTP API driven through a client nobody here wrote: the one openapi-python-client
generates from onejob's own openapi.json.

Run by `cargo test` (crates/onejob/tests/api/openapi_client.rs), which starts onejob with
workers on a fake provider, generates the client (package `onejob_api`) from the document
the server serves, puts it on PYTHONPATH and passes:

  ONEJOB_URL       the server, http://127.0.0.1:PORT
  ONEJOB_API_KEY   a onejob API key

Every case uses its own Idempotency-Key, so the cases do not see each other. Each goes
through the generated functions and models only: `submit_job`, `get_job`, `list_jobs`,
`list_job_events`, and `Problem` for every refusal.
"""

import os
import time
import unittest
import uuid

from onejob_api import AuthenticatedClient
from onejob_api.api.jobs import get_job, list_job_events, list_jobs, submit_job
from onejob_api.models import JobList, JobView, Problem, SubmitBody
from onejob_api.models.job_view_state import JobViewState


def required(name):
    value = os.environ.get(name)
    if not value:
        raise SystemExit(
            f"{name} is not set; this test is run by cargo test (tests/api/openapi_client.rs)"
        )
    return value.rstrip("/")


BASE_URL = required("ONEJOB_URL")
API_KEY = required("ONEJOB_API_KEY")
RUN = uuid.uuid4().hex[:8]
PROBLEMS = "https://onejob.dev/problems/"


def client(token=API_KEY):
    return AuthenticatedClient(base_url=BASE_URL, token=token, timeout=30.0)


def body(prompt):
    return SubmitBody(kind="chat.completion", params={"prompt": prompt})


def problem_slug(parsed):
    """The slug of a parsed Problem's `type`."""
    return str(parsed.type_.value).removeprefix(PROBLEMS)


class GeneratedClient(unittest.TestCase):
    def test_submit_creates_a_job_and_the_same_key_replays_it(self):
        key = f"{RUN}:replay"
        with client() as api:
            created = submit_job.sync_detailed(client=api, body=body("a red fox"), idempotency_key=key)
            self.assertEqual(created.status_code, 201, created.content)
            self.assertIsInstance(created.parsed, JobView)
            self.assertEqual(created.parsed.kind, "chat.completion")
            self.assertEqual(created.headers["location"], f"/v1/jobs/{created.parsed.id}")

            replayed = submit_job.sync_detailed(client=api, body=body("a red fox"), idempotency_key=key)
            self.assertEqual(replayed.status_code, 200, replayed.content)
            self.assertIsInstance(replayed.parsed, JobView)
            self.assertEqual(replayed.parsed.id, created.parsed.id, "one key, one job")
            self.assertEqual(replayed.headers["idempotent-replayed"], "true")

    def test_the_same_key_with_other_params_is_a_422_problem(self):
        key = f"{RUN}:reused"
        with client() as api:
            first = submit_job.sync(client=api, body=body("a red fox"), idempotency_key=key)
            self.assertIsInstance(first, JobView)
            refused = submit_job.sync_detailed(client=api, body=body("a grey wolf"), idempotency_key=key)
            self.assertEqual(refused.status_code, 422, refused.content)
            self.assertIsInstance(refused.parsed, Problem)
            self.assertEqual(problem_slug(refused.parsed), "key-reused")
            self.assertEqual(refused.parsed.status, 422)
            # Extension members arrive as the model's additional properties.
            self.assertEqual(refused.parsed["job_id"], str(first.id))
            self.assertEqual(refused.parsed["changed"], ["/prompt"])
            self.assertFalse(refused.parsed["kind_changed"])
            # The stored job is untouched.
            again = get_job.sync(client=api, id=first.id)
            self.assertIsInstance(again, JobView)
            self.assertEqual(again.id, first.id)

    def test_the_job_is_read_back_by_id_and_by_key_until_it_succeeds(self):
        key = f"{RUN}:read"
        with client() as api:
            submitted = submit_job.sync(client=api, body=body("a quick fox"), idempotency_key=key)
            self.assertIsInstance(submitted, JobView)
            deadline = time.monotonic() + 60
            job = submitted
            while job.state not in (JobViewState.SUCCEEDED, JobViewState.FAILED):
                self.assertLess(time.monotonic(), deadline, f"still {job.state} after 60 s")
                time.sleep(min(job.poll_after_ms or 200, 500) / 1000)
                job = get_job.sync(client=api, id=submitted.id)
                self.assertIsInstance(job, JobView)
            self.assertEqual(job.state, JobViewState.SUCCEEDED, job)
            self.assertEqual(job.completed_by is not None, True)
            self.assertIn("text", job.result)

            by_key = list_jobs.sync(client=api, idempotency_key=key)
            self.assertIsInstance(by_key, JobView, "with a key, GET /v1/jobs answers the job")
            self.assertEqual(by_key.id, submitted.id)
            self.assertEqual(by_key.result, job.result)

            page = list_jobs.sync(client=api, limit=500)
            self.assertIsInstance(page, JobList, "without a key, a page of jobs")
            self.assertIn(submitted.id, [j.id for j in page.jobs])

            events = list_job_events.sync(client=api, id=submitted.id)
            self.assertEqual(events.job_id, submitted.id)
            self.assertEqual(events.events[0].kind.value, "created")

    def test_refusals_are_problems(self):
        with client() as api:
            missing = list_jobs.sync_detailed(client=api, idempotency_key=f"{RUN}:never")
            self.assertEqual(missing.status_code, 404, missing.content)
            self.assertIsInstance(missing.parsed, Problem)
            self.assertEqual(problem_slug(missing.parsed), "not-found")

            unknown = submit_job.sync_detailed(
                client=api,
                body=SubmitBody(kind="no.such.kind", params={}),
                idempotency_key=f"{RUN}:unknown-kind",
            )
            self.assertEqual(unknown.status_code, 400, unknown.content)
            self.assertEqual(problem_slug(unknown.parsed), "unknown-kind")
            self.assertIn("chat.completion", unknown.parsed["known_kinds"])

        with client("oj_not_a_key") as stranger:
            refused = get_job.sync_detailed(client=stranger, id=uuid.uuid4())
            self.assertEqual(refused.status_code, 401, refused.content)
            self.assertEqual(problem_slug(refused.parsed), "unauthorized")


if __name__ == "__main__":
    unittest.main(verbosity=2)
