"""Job integrations: what turns a job (one object, as a batch/v1 Job is, or several) into a
Workload and back.

Importing the package registers every integration (framework.INTEGRATIONS): one module each."""

from . import batch_job as batch_job
from . import deployment as deployment
from . import jobset as jobset
from . import leaderworkerset as leaderworkerset
from . import pod as pod
from . import raycluster as raycluster
from . import statefulset as statefulset
