import os
import time

from onejob_api import AuthenticatedClient
from onejob_api.api.jobs import get_job, submit_job
from onejob_api.models import SubmitBody

api = AuthenticatedClient(
    base_url=os.environ.get("ONEJOB_URL", "http://127.0.0.1:8080"),
    token=os.environ["ONEJOB_API_KEY"],  # the key `onejob serve` printed
)
job = submit_job.sync(
    client=api,
    idempotency_key="order-43:caption",  # the same on every retry
    body=SubmitBody(kind="chat.completion", params={"prompt": "Describe a red fox."}),
)
while job.poll_after_ms:  # present until the job has finished
    time.sleep(job.poll_after_ms / 1000)
    job = get_job.sync(client=api, id=job.id)
print(job.state.value, job.result)
