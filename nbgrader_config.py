# nbgrader: the source notebooks live in solutions/, the student release in labs/.
#   nbgrader generate_assignment lab1 --force      (make regenerates every lab: `make release`)
import os

c = get_config()  # noqa: F821 - provided by nbgrader
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "labs"
c.CourseDirectory.course_id = "kafka-course"
# an absolute path: the formgrader of a hub runs from the instructor's home, not from here
os.makedirs(os.path.join(c.CourseDirectory.root, ".nbgrader"), exist_ok=True)
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, ".nbgrader", "gradebook.db")
# The release keeps only the notebooks and their contract files.
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "*_pb2.py",
    "*_pb2_grpc.py",
    "home",
    "tmp",
    "feedback",
]
# Collect believes the machine, not the submission: who owns it, when it arrived, and no links
# (a link to the solutions would be copied as the instructor). See autograder/exchange.py.
c.ExchangeFactory.collect = "autograder.exchange.CheckedCollect"
# Files over 10 MB are not copied (collect, autograde): nbgrader parses a notebook in its own
# process before the grader sees it, and a 21 MB one took 880 MB there. The grader refuses
# notebooks over 8 MB itself, with a message (autograder/pipeline.py MAX_NOTEBOOK_BYTES).
c.CourseDirectory.max_file_size = 10 * 1024  # kilobytes
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Autograding runs the grader's own pipeline instead of nbgrader's Execute step: the student's
# code in the bubblewrap sandbox, the checks outside the kernel (autograder/nbgrader_step.py),
# so `nbgrader autograde` and `python -m autograder grade` give the same points.
# On a machine without bubblewrap: c.GradeInSandbox.sandbox = False (results say what that loses).
c.Autograde.autograde_preprocessors = [
    "autograder.nbgrader_step.GradeInSandbox",
    "autograder.nbgrader_step.SanitizeMarkup",  # the formgrader shows it on the instructor's server
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "autograder.nbgrader_step.KeepCourseCopy",  # instead of DeduplicateIds
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
